"""The hook protocol the walker reports through, and the outcome values it reports.

Invariant: the walker calls hooks from one thread at a time (it serialises them), in this order
per step: `step_starting` (before any side effect; the state recorder journals here),
`before_side_effect`, zero or more `step_progress`, then `step_finished`. `before_side_effect` is
the one call made outside that serialisation, from the step's worker thread, so that it may block
without holding up other steps (the state recorder may wait there until an intent is written).
Outcomes carry non-secret outputs only; secret outputs are passed to `step_finished` separately
and must not be kept by hooks other than the executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from fleetplan.addrs import Address
from fleetplan.errors import Diagnostic
from fleetplan.live.handlers import Result
from fleetplan.plan.model import Plan, Step


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"  # a dependency failed or was skipped


@dataclass(frozen=True)
class Outcome:
    step: Step
    status: Status
    result: Result | None = None
    error: Diagnostic | None = None
    root_cause: Address | None = None  # for skipped steps: the failed step that caused it
    seconds: float = 0.0


@dataclass(frozen=True)
class ApplySummary:
    outcomes: tuple[Outcome, ...] = field(default=())

    @property
    def failures(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == Status.FAILED)

    @property
    def skipped(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == Status.SKIPPED)

    def counts(self) -> tuple[int, int, int]:
        from fleetplan.plan.model import Action

        ok = [o.step.action for o in self.outcomes if o.status == Status.OK]
        add = sum(a in (Action.CREATE, Action.REPLACE) for a in ok)
        change = sum(a == Action.UPDATE for a in ok)
        destroy = sum(a in (Action.DELETE, Action.REPLACE) for a in ok)
        return add, change, destroy


class Hook:
    """Base hook: every method is a no-op, so hooks override only what they need."""

    def plan_starting(self, plan: Plan) -> None: ...
    def step_starting(self, step: Step) -> None: ...
    def before_side_effect(self, step: Step) -> None: ...
    def step_progress(self, step: Step, message: str) -> None: ...
    def step_finished(self, outcome: Outcome) -> None: ...
    def plan_finished(self, summary: ApplySummary) -> None: ...


class Hooks(Hook):
    """Fan-out to several hooks, in order."""

    def __init__(self, hooks: Sequence[Hook]) -> None:
        self._hooks = tuple(hooks)

    def plan_starting(self, plan: Plan) -> None:
        for hook in self._hooks:
            hook.plan_starting(plan)

    def step_starting(self, step: Step) -> None:
        for hook in self._hooks:
            hook.step_starting(step)

    def before_side_effect(self, step: Step) -> None:
        for hook in self._hooks:
            hook.before_side_effect(step)

    def step_progress(self, step: Step, message: str) -> None:
        for hook in self._hooks:
            hook.step_progress(step, message)

    def step_finished(self, outcome: Outcome) -> None:
        for hook in self._hooks:
            hook.step_finished(outcome)

    def plan_finished(self, summary: ApplySummary) -> None:
        for hook in self._hooks:
            hook.plan_finished(summary)
