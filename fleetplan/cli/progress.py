"""The human progress view of apply and destroy: what runs, what is awaited, for how long.

Every line names the address; finished steps carry a counter (`[12/37]`) and their duration. A
step that runs longer than `HEARTBEAT` seconds without saying anything gets a Terraform-style
`Still creating... [20s elapsed]` line, so a silent wait is never mistaken for a hang, and the
readiness messages the engine reports (`waiting for Deployment x available (0/1 replicas)`) carry
the elapsed time too.

On a terminal with colour, one status line at the bottom is redrawn in place (`[12/37 done,
3 running, 45s] waiting for ...`); it is erased before any other line is printed and when the
run ends. Elsewhere (CI logs, pipes, `--no-color`) there is no status line and no control
character: plain lines only, at most one heartbeat per step every `HEARTBEAT` seconds.

Invariant: the walker calls hooks one at a time, but the ticker thread also writes, so every
write holds `_lock`.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Hook, Outcome, Status
from fleetplan.plan.model import Action, Plan, Step

HEARTBEAT = 10.0
TICK = 1.0
VERBS = {
    Action.CREATE: ("Creating", "Creation", "creating"),
    Action.UPDATE: ("Modifying", "Modifications", "modifying"),
    Action.DELETE: ("Destroying", "Destruction", "destroying"),
    Action.REPLACE: ("Replacing", "Replacement", "replacing"),
    Action.READ: ("Reading", "Read", "reading"),
}
_COLOURS = {"green": "32", "red": "31", "yellow": "33"}


@dataclass
class _Running:
    step: Step
    started: float
    last_said: float
    awaiting: str = ""


class HumanProgress(Hook):
    def __init__(
        self,
        *,
        color: bool,
        live: bool | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        ticker: bool = True,
    ) -> None:
        self.out = out or sys.stdout
        self.color = color
        self.live = (color and self.out.isatty()) if live is None else live
        self.clock = clock
        self.use_ticker = ticker
        self.total = 0
        self.done = 0
        self.started = clock()
        self.running: dict[Address, _Running] = {}
        self._lock = threading.RLock()
        self._status_shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- hook methods ---------------------------------------------------------------------
    def plan_starting(self, plan: Plan) -> None:
        self.total = sum(1 for s in plan.steps if s.action in VERBS)
        self.started = self.clock()
        if self.use_ticker and self.total:
            self._thread = threading.Thread(target=self._tick_forever, name="fleetplan-progress", daemon=True)
            self._thread.start()

    def step_starting(self, step: Step) -> None:
        if step.action not in VERBS:
            return
        now = self.clock()
        with self._lock:
            self.running[step.address] = _Running(step, now, now)
            self.say(f"{step.address}: {VERBS[step.action][0]}...")

    def step_progress(self, step: Step, message: str) -> None:
        now = self.clock()
        with self._lock:
            run = self.running.get(step.address)
            elapsed = f" [{_duration(now - run.started)} elapsed]" if run else ""
            if run:
                run.last_said, run.awaiting = now, message
            self.say(f"{step.address}: Still {_gerund(step)}: {message}{elapsed}")

    def step_finished(self, outcome: Outcome) -> None:
        step = outcome.step
        with self._lock:
            self.running.pop(step.address, None)
            if step.action not in VERBS and outcome.status == Status.OK:
                return
            self.done += 1
            count = f" [{self.done}/{self.total}]" if self.total else ""
            if outcome.status == Status.OK:
                self.say(f"{step.address}: {VERBS[step.action][1]} complete after "
                         f"{_duration(outcome.seconds)}{count}", "green")
            elif outcome.status == Status.FAILED and outcome.error:
                self.say(f"{step.address}: Error after {_duration(outcome.seconds)}: "
                         f"{outcome.error.summary}{count}", "red")
            elif outcome.status == Status.SKIPPED:
                self.say(f"{step.address}: Skipped: {outcome.root_cause} failed{count}", "yellow")

    def plan_finished(self, summary: ApplySummary) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * TICK)
        with self._lock:
            self._erase_status()

    # --- output -----------------------------------------------------------------------------
    def say(self, text: str, colour: str | None = None) -> None:
        """One permanent line (the status line, if any, is redrawn below it)."""
        with self._lock:
            self._erase_status()
            if self.color and colour:
                text = f"\033[{_COLOURS[colour]}m{text}\033[0m"
            self.out.write(text + "\n")
            self._draw_status()
            self.out.flush()

    def tick(self) -> None:
        """Heartbeats for silent steps, and a fresh status line; the ticker calls this every second."""
        now = self.clock()
        with self._lock:
            for run in sorted(self.running.values(), key=lambda r: str(r.step.address)):
                if now - run.last_said >= HEARTBEAT:
                    run.last_said = now
                    self.say(f"{run.step.address}: Still {_gerund(run.step)}... "
                             f"[{_duration(now - run.started)} elapsed]")
            if self.live:
                self._erase_status()
                self._draw_status()
                self.out.flush()

    def status_text(self) -> str:
        now = self.clock()
        head = f"[{self.done}/{self.total} done, {len(self.running)} running, {_duration(now - self.started)}]"
        if not self.running:
            return head
        oldest = min(self.running.values(), key=lambda r: r.started)
        what = oldest.awaiting or f"{_gerund(oldest.step)} {oldest.step.address}"
        return f"{head} {what} ({_duration(now - oldest.started)})"

    def _draw_status(self) -> None:
        if not self.live or self._stop.is_set():
            return
        width = shutil.get_terminal_size((100, 20)).columns
        text = self.status_text()
        self.out.write(text[: max(10, width - 1)])
        self._status_shown = True

    def _erase_status(self) -> None:
        if self._status_shown:
            self.out.write("\r\033[K")
            self._status_shown = False

    def _tick_forever(self) -> None:
        while not self._stop.wait(TICK):
            self.tick()


def _gerund(step: Step) -> str:
    return VERBS[step.action][2] if step.action in VERBS else "working"


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
