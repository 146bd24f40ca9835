"""`FieldChange`: one changed field, with values safe to show, store and serialise.

Invariant: `before`/`after` never hold a sensitive value; they hold `SENSITIVE` instead (and
`KNOWN_AFTER_APPLY` / `SENSITIVE_KNOWN_AFTER_APPLY` for values only an apply can produce).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SENSITIVE = "(sensitive value)"
KNOWN_AFTER_APPLY = "(known after apply)"
SENSITIVE_KNOWN_AFTER_APPLY = "(sensitive, known after apply)"
ABSENT = None  # a field that is not set on one side


@dataclass(frozen=True)
class FieldChange:
    path: str  # dotted, list items as [i] or [key=value]: spec.template.spec.containers[name=app].image
    before: Any
    after: Any

    @property
    def kind(self) -> str:
        if self.before is ABSENT:
            return "add"
        if self.after is ABSENT:
            return "remove"
        return "change"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}
