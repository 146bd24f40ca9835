"""A test-only hook that SIGKILLs the running process at an exact step boundary.

Crash-and-resume tests need kills at precise points, which a timer cannot hit. When test hooks are
on (`FLEETPLAN_TEST_HOOKS=1`) and `FLEETPLAN_TEST_KILL_AT` is set to `<point>:<n>`, the n-th
(1-based) occurrence of that point kills the process with SIGKILL (no cleanup, no finally blocks,
the lock file stays), exactly like a crash or an OOM kill:

    start:n       after the n-th step's intent was journaled and written, before its side effect
    unrecorded:n  after the n-th finished step's side effect, before the state recorded it
    finish:n      after the n-th finished step was recorded in the state and that was written

Invariant: a stray `FLEETPLAN_TEST_KILL_AT` alone (left in a CI job's environment, copied from a
test log) never kills anything: both variables must be set, and the CLI prints `test_hooks_notice`
on stderr whenever either is, so a production run with hooks on cannot go unnoticed. Without them
the hooks are empty and nothing changes. The hooks sit around the state recorder: `before` hooks
run ahead of it, `after` hooks behind it (see `cli.applying`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from fleetplan.apply.hooks import Hook, Outcome
from fleetplan.plan.model import Step

ENV_KILL_AT = "FLEETPLAN_TEST_KILL_AT"
ENV_TEST_HOOKS = "FLEETPLAN_TEST_HOOKS"
POINTS = ("start", "unrecorded", "finish")


class KillSwitch(Hook):
    """Kills the process at the n-th occurrence of one hook event."""

    def __init__(self, event: str, n: int, settle: Callable[[], None] = lambda: None) -> None:
        self._event, self._left, self._settle = event, n, settle
        self._lock = threading.Lock()  # `before_side_effect` comes from several workers at once

    def _tick(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0:
                self._settle()
                os.kill(os.getpid(), signal.SIGKILL)

    def before_side_effect(self, step: Step) -> None:
        if self._event == "starting" and step.action.has_side_effects:
            self._tick()

    def step_finished(self, outcome: Outcome) -> None:
        if self._event == "finished" and outcome.step.action.has_side_effects:
            self._tick()


def test_hooks_enabled() -> bool:
    return os.environ.get(ENV_TEST_HOOKS, "") == "1"


def test_hooks_notice() -> str | None:
    """What the CLI must print on stderr when test hooks are on or half-configured, else None."""
    spec = os.environ.get(ENV_KILL_AT, "")
    if test_hooks_enabled():
        return (f"WARNING: {ENV_TEST_HOOKS}=1: test hooks are ON; this run will SIGKILL itself at "
                f"{ENV_KILL_AT}={spec or '(unset)'}. Never set {ENV_TEST_HOOKS} outside tests.")
    if spec:
        return f"warning: {ENV_KILL_AT} is set but ignored ({ENV_TEST_HOOKS}=1 is not set)"
    return None


def kill_switches(settle: Callable[[], None]) -> tuple[list[Hook], list[Hook]]:
    """(hooks to run before the state recorder, hooks to run after it) from the environment;
    empty unless test hooks are on. `settle` makes what the recorder has recorded durable (its
    `flush`), so a kill after a record happens after that record was written."""
    if not test_hooks_enabled():
        return [], []
    spec = os.environ.get(ENV_KILL_AT, "")
    point, _, count = spec.partition(":")
    if point not in POINTS or not count.isdigit() or int(count) < 1:
        return [], []
    n = int(count)
    if point == "unrecorded":
        return [KillSwitch("finished", n)], []
    if point == "start":  # the recorder's `before_side_effect` has written the intent by then
        return [], [KillSwitch("starting", n)]
    return [], [KillSwitch("finished", n, settle)]
