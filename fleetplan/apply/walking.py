"""Walk a plan in dependency order with bounded parallelism; skip dependents of failures.

Invariants:
- A step starts only after every step in its `depends_on` (that is in the plan) finished OK; if
  one failed or was skipped, the step is skipped with that root cause and never executed.
- At most `parallelism` steps execute at once; independent clusters therefore proceed in parallel
  and one failing member does not stop the others.
- Hooks are called under one lock (see `hooks`); `step_starting` happens before the executor runs.
- The walker knows nothing about clusters or the config: an `Executor` does the work.
- Every step that starts also finishes: an exception of any type from the executor is that step's
  FAILED outcome (a non-`FleetplanError` one is an "internal error" naming its type), so
  `step_finished` and `plan_finished` always run and the state records what the other steps did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Hook, Outcome, Status
from fleetplan.errors import Diagnostic, FleetplanError
from fleetplan.live.handlers import Result
from fleetplan.plan.model import Plan, Step

DEFAULT_PARALLELISM = 10
_MESSAGE_LIMIT = 200


class Executor(Protocol):
    def execute(self, step: Step, progress: Callable[[str], None]) -> Result: ...


def walk_plan(
    plan: Plan, executor: Executor, hook: Hook, *, parallelism: int = DEFAULT_PARALLELISM
) -> ApplySummary:
    steps = {s.address: s for s in plan.steps}
    pending = dict(steps)
    outcomes: dict[Address, Outcome] = {}
    hook_lock = threading.Lock()

    def call(fn: Callable[[], None]) -> None:
        with hook_lock:
            fn()

    def run(step: Step) -> Outcome:
        started = time.monotonic()
        call(lambda: hook.step_starting(step))
        try:
            result = executor.execute(step, lambda message: call(lambda: hook.step_progress(step, message)))
        except FleetplanError as err:
            first = err.diagnostics[0]
            error = Diagnostic(first.summary, address=first.address or str(step.address), hint=first.hint)
            return Outcome(step, Status.FAILED, error=error, seconds=time.monotonic() - started)
        except Exception as err:  # a bug in a handler must not abort the walk and lose the state
            error = Diagnostic(
                f"internal error: {type(err).__name__}: {_short(err)}",
                address=str(step.address),
                hint="this is a bug in fleetplan; please report it with this message",
            )
            return Outcome(step, Status.FAILED, error=error, seconds=time.monotonic() - started)
        return Outcome(step, Status.OK, result=result, seconds=time.monotonic() - started)

    call(lambda: hook.plan_starting(plan))
    running: dict[Future[Outcome], Address] = {}
    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        while pending or running:
            progressed = False
            for address in sorted(pending, key=str):
                step = pending[address]
                deps = [d for d in step.depends_on if d in steps]
                blocked = next(
                    (outcomes[d] for d in deps if d in outcomes and outcomes[d].status != Status.OK), None
                )
                if blocked is not None:
                    root = blocked.root_cause if blocked.status == Status.SKIPPED else blocked.step.address
                    outcome = Outcome(step, Status.SKIPPED, root_cause=root)
                    outcomes[address] = outcome
                    call(lambda o=outcome: hook.step_finished(o))  # type: ignore[misc]
                    del pending[address]
                    progressed = True
                elif all(d in outcomes for d in deps) and len(running) < max(1, parallelism):
                    running[pool.submit(run, step)] = address
                    del pending[address]
                    progressed = True
            if progressed and pending and len(running) < max(1, parallelism):
                continue
            if not running:
                if pending:  # dependencies that can never finish: report instead of hanging
                    for address, step in sorted(pending.items(), key=lambda i: str(i[0])):
                        outcome = Outcome(
                            step,
                            Status.FAILED,
                            error=Diagnostic("its dependencies never completed", address=str(address)),
                        )
                        outcomes[address] = outcome
                    pending.clear()
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                address = running.pop(future)
                outcome = future.result()
                outcomes[address] = outcome
                call(lambda o=outcome: hook.step_finished(o))  # type: ignore[misc]
    summary = ApplySummary(tuple(outcomes[s.address] for s in plan.steps if s.address in outcomes))
    call(lambda: hook.plan_finished(summary))
    return summary


def _short(err: Exception) -> str:
    """The first line of the message, bounded: an exception's text is not meant for users and may
    quote whatever the failing code held."""
    text = (str(err).strip().splitlines() or [""])[0]
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
