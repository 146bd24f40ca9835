"""Walk a plan in dependency order with bounded parallelism; skip dependents of failures.

Invariants:
- A step starts only after every step in its `depends_on` (that is in the plan) finished OK; if
  one failed or was skipped, the step is skipped with that root cause and never executed.
- At most `parallelism` steps execute at once on one cluster, and clusters proceed independently
  (up to `_MAX_WORKERS` steps at once in all): an API server's limits are its own, and a fleet of
  200 members takes as long as its slowest member, not 200 times one member's share of a global
  limit. One failing member does not stop the others.
- Scheduling is O(steps + edges): a step becomes ready when its last dependency finishes.
- Hooks are called under one lock (see `hooks`), except `before_side_effect`, which runs in the
  step's worker between `step_starting` and the executor and may block (group commit of the state).
- The walker knows nothing about clusters or the config: an `Executor` does the work.
- Every step that starts also finishes: an exception of any type from the executor is that step's
  FAILED outcome (a non-`FleetplanError` one is an "internal error" naming its type), so
  `step_finished` and `plan_finished` always run and the state records what the other steps did.
"""

from __future__ import annotations

import heapq
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

DEFAULT_PARALLELISM = 10  # steps at once per cluster
_MAX_WORKERS = 64  # steps at once in all (threads); steps mostly wait on the network
_MESSAGE_LIMIT = 200


class Executor(Protocol):
    def execute(self, step: Step, progress: Callable[[str], None]) -> Result: ...


def walk_plan(
    plan: Plan, executor: Executor, hook: Hook, *, parallelism: int = DEFAULT_PARALLELISM
) -> ApplySummary:
    steps = {s.address: s for s in plan.steps}
    limit = max(1, parallelism)
    # Kahn's algorithm: a step is ready when every dependency in the plan finished OK.
    waiting_on = {a: {d for d in s.depends_on if d in steps and d != a} for a, s in steps.items()}
    dependents: dict[Address, list[Address]] = {a: [] for a in steps}
    for address, deps in waiting_on.items():
        for dep in deps:
            dependents[dep].append(address)
    keys = {a: str(a) for a in steps}  # ready steps start in address order, per cluster
    ready: dict[str, list[tuple[str, Address]]] = {}
    running_on: dict[str, int] = {}
    outcomes: dict[Address, Outcome] = {}
    hook_lock = threading.Lock()

    def call(fn: Callable[[], None]) -> None:
        with hook_lock:
            fn()

    def make_ready(address: Address) -> None:
        heapq.heappush(ready.setdefault(address.cluster, []), (keys[address], address))

    def run(step: Step) -> Outcome:
        started = time.monotonic()
        call(lambda: hook.step_starting(step))
        hook.before_side_effect(step)
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

    def finished(outcome: Outcome) -> None:
        """Record an outcome; release its dependents, or skip them (and theirs) with its root cause."""
        todo = [outcome]
        while todo:
            done = todo.pop()
            outcomes[done.step.address] = done
            call(lambda o=done: hook.step_finished(o))  # type: ignore[misc]
            for dependent in dependents[done.step.address]:
                if dependent in outcomes:
                    continue
                if done.status != Status.OK:
                    root = done.root_cause if done.status == Status.SKIPPED else done.step.address
                    waiting_on[dependent].clear()
                    todo.append(Outcome(steps[dependent], Status.SKIPPED, root_cause=root))
                    outcomes[dependent] = todo[-1]  # claimed: another failed dependency does not skip it twice
                else:
                    waiting_on[dependent].discard(done.step.address)
                    if not waiting_on[dependent]:
                        make_ready(dependent)

    call(lambda: hook.plan_starting(plan))
    for address in steps:
        if not waiting_on[address]:
            make_ready(address)
    clusters = sorted({a.cluster for a in steps})
    workers = max(1, min(_MAX_WORKERS, limit * max(1, len(clusters)), len(steps) or 1))
    running: dict[Future[Outcome], Address] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while True:
            for cluster in clusters:  # start what may start: at most `limit` steps per cluster
                queue = ready.get(cluster)
                while queue and running_on.get(cluster, 0) < limit and len(running) < workers:
                    _, address = heapq.heappop(queue)
                    running_on[cluster] = running_on.get(cluster, 0) + 1
                    running[pool.submit(run, steps[address])] = address
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: keys[running[f]]):
                address = running.pop(future)
                running_on[address.cluster] -= 1
                finished(future.result())
    for address, step in sorted(steps.items(), key=lambda i: keys[i[0]]):
        if address not in outcomes:  # dependencies that can never finish (a cycle): report, don't hang
            outcomes[address] = Outcome(
                step, Status.FAILED, error=Diagnostic("its dependencies never completed", address=str(address))
            )
    summary = ApplySummary(tuple(outcomes[s.address] for s in plan.steps if s.address in outcomes))
    call(lambda: hook.plan_finished(summary))
    return summary


def _short(err: Exception) -> str:
    """The first line of the message, bounded: an exception's text is not meant for users and may
    quote whatever the failing code held."""
    text = (str(err).strip().splitlines() or [""])[0]
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
