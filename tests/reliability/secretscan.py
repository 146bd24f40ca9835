"""Finding secret values in artifacts: every encoding a leak could take, and where it was found.

A secret is searched for as itself, base64-encoded (as in a Secret's data or a kubeconfig), and by
a distinctive piece: a JWT's signature segment, a PEM key's longest body line. A hit names the
artifact and the secret's label, never the value.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def _forms(value: str) -> set[str]:
    forms = {value, base64.b64encode(value.encode()).decode()}
    parts = value.split(".")
    if len(parts) == 3 and len(parts[2]) >= 32:  # a JWT: its signature alone is as good as the token
        forms.add(parts[2])
    if "-----BEGIN" in value:
        body = [line for line in value.splitlines() if line and not line.startswith("-----")]
        if body:
            forms.add(max(body, key=len))
    return {f for f in forms if len(f) >= 16}


@dataclass
class SecretSet:
    """Labelled secret values (a label says what it is: 'member c2 token', never the value)."""

    values: dict[str, str] = field(default_factory=dict)

    def add(self, label: str, value: str | None) -> None:
        if value and len(value) >= 16:
            self.values.setdefault(label, value)

    def scan(self, artifacts: Mapping[str, bytes | str]) -> list[tuple[str, str]]:
        """(artifact, secret label) for every secret found in every artifact."""
        hits = []
        for name, content in artifacts.items():
            text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
            for label, value in self.values.items():
                if any(form in text for form in _forms(value)):
                    hits.append((name, label))
        return hits


def annotations_and_labels(objects: Iterable[Mapping[str, object]]) -> dict[str, str]:
    """`kind/ns/name annotations` -> the object's annotations and labels, as one text per object."""
    import json

    out = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        assert isinstance(meta, dict)
        key = f"{obj.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name')} annotations+labels"
        out[key] = json.dumps({"annotations": meta.get("annotations") or {}, "labels": meta.get("labels") or {}})
    return out
