"""The state recorder: intents written before any side effect, records written as steps finish, many
finished steps sharing one write, and a failed write stopping the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Hook, Hooks, Outcome, Status
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import walk_plan
from fleetplan.errors import StateError
from fleetplan.live.handlers import Result
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.state.model import State


class MemoryStore:
    """Keeps every written state; each write takes `delay` seconds, like an fsync."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.writes: list[State] = []
        self.delay, self.fail = delay, fail
        self._lock = threading.Lock()

    def persist(self, state: State) -> State:
        if self.fail:
            raise StateError("cannot write state: disk full")
        time.sleep(self.delay)
        with self._lock:
            written = replace(state, serial=len(self.writes) + 1)
            self.writes.append(written)
        return written

    @property
    def last(self) -> State:
        return self.writes[-1]


def _address(i: int) -> Address:
    return Address("c1", "", "ConfigMap", "ns", f"cm{i}")


def _plan(count: int, deps: Callable[[int], tuple[Address, ...]] = lambda i: ()) -> Plan:
    steps = tuple(Step(_address(i), Action.CREATE, "new", api_version="v1", depends_on=deps(i),
                       body_hash=f"h{i}") for i in range(count))
    return Plan("demo", Mode.NORMAL, steps, None, 0, "")


class Seen(Hook):
    """Records, at each step's side effect, what the store held at that moment."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.journaled_at_start: dict[Address, bool] = {}

    def before_side_effect(self, step: Step) -> None:
        written = self.store.writes[-1] if self.store.writes else None
        self.journaled_at_start[step.address] = bool(written and written.journal_for(step.address))


class Executor:
    def __init__(self, fail: set[Address] | None = None, pause: float = 0.0) -> None:
        self.fail, self.pause = fail or set(), pause

    def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
        time.sleep(self.pause)
        if step.address in self.fail:
            raise StateError("boom")  # any FleetplanError fails the step
        return Result(uid=f"uid-{step.address.name}")


def test_every_intent_is_written_before_any_side_effect_in_one_write() -> None:
    store = MemoryStore()
    seen = Seen(store)
    plan = _plan(20)
    summary = walk_plan(plan, Executor(), Hooks([StateRecorder(store, None, "demo"), seen]), parallelism=5)
    assert not summary.failures
    first = store.writes[0]
    assert {e.address for e in first.journal} == {s.address for s in plan.steps} and not first.resources
    assert all(seen.journaled_at_start.values()) and len(seen.journaled_at_start) == 20
    assert store.last.journal == () and {a.name for a in store.last.resources} == {f"cm{i}" for i in range(20)}
    assert store.last.resources[_address(3)].uid == "uid-cm3"


def test_finished_steps_share_writes() -> None:
    store = MemoryStore(delay=0.02)  # a slow disk: records pile up while a write is under way
    summary = walk_plan(_plan(60), Executor(pause=0.005), StateRecorder(store, None, "demo"), parallelism=10)
    assert not summary.failures and store.last.journal == () and len(store.last.resources) == 60
    # one write for the intents, then far fewer writes than the 60 records they carry
    assert len(store.writes) <= 25, len(store.writes)
    assert [s.serial for s in store.writes] == list(range(1, len(store.writes) + 1))


def test_records_are_written_while_the_run_goes_on_not_only_at_the_end() -> None:
    store = MemoryStore()
    recorder = StateRecorder(store, None, "demo", interval=0.01)
    plan = _plan(2)
    recorder.plan_starting(plan)
    recorder.step_finished(Outcome(plan.steps[0], Status.OK, result=Result(uid="u0")))
    deadline = time.monotonic() + 5
    while _address(0) not in store.last.resources and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _address(0) in store.last.resources  # written by the writer, no flush asked
    assert [e.address for e in store.last.journal] == [_address(1)]
    recorder.plan_finished(ApplySummary())


def test_a_failed_step_keeps_its_intent_and_its_skipped_dependents_drop_theirs() -> None:
    store = MemoryStore()
    plan = _plan(3, deps=lambda i: (_address(0),) if i == 1 else ())
    summary = walk_plan(plan, Executor(fail={_address(0)}), StateRecorder(store, None, "demo"), parallelism=2)
    assert [o.step.address for o in summary.failures] == [_address(0)]
    assert [o.step.address for o in summary.skipped] == [_address(1)]
    assert [e.address for e in store.last.journal] == [_address(0)]  # may have happened: re-read next time
    assert set(store.last.resources) == {_address(2)}


def test_a_state_that_cannot_be_written_stops_the_run_before_any_side_effect() -> None:
    ran: list[Address] = []

    class Recording(Executor):
        def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
            ran.append(step.address)
            return super().execute(step, progress)

    with pytest.raises(StateError, match="disk full"):
        walk_plan(_plan(4), Recording(), StateRecorder(MemoryStore(fail=True), None, "demo"))
    assert ran == []


def test_a_step_outside_the_plan_waits_for_its_own_intent() -> None:
    store = MemoryStore(delay=0.05)
    recorder = StateRecorder(store, None, "demo")
    recorder.plan_starting(_plan(0))
    late = Step(_address(9), Action.DELETE, "gone", api_version="v1")
    recorder.step_starting(late)
    recorder.before_side_effect(late)
    assert store.last.journal_for(_address(9)) is not None
    recorder.plan_finished(ApplySummary())


def test_parallelism_is_per_cluster_and_clusters_proceed_together() -> None:
    lock = threading.Lock()
    now: dict[str, int] = {}
    peak: dict[str, int] = {}
    peak_total = [0]
    started: dict[Address, float] = {}
    ended: dict[Address, float] = {}

    class Counting(Executor):
        def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
            cluster = step.address.cluster
            with lock:
                started[step.address] = time.monotonic()
                now[cluster] = now.get(cluster, 0) + 1
                peak[cluster] = max(peak.get(cluster, 0), now[cluster])
                peak_total[0] = max(peak_total[0], sum(now.values()))
            time.sleep(0.03)
            with lock:
                now[cluster] -= 1
                ended[step.address] = time.monotonic()
            return Result(uid="u")

    steps = tuple(Step(Address(f"c{c}", "", "ConfigMap", "ns", f"cm{i}"), Action.CREATE, "new", api_version="v1")
                  for c in range(4) for i in range(6))
    # c0's last ConfigMap waits for its first: it starts only after that one finished
    chained = tuple(replace(s, depends_on=(steps[0].address,)) if s.address == steps[5].address else s for s in steps)
    summary = walk_plan(Plan("demo", Mode.NORMAL, chained, None, 0, ""), Counting(), Hook(), parallelism=2)
    assert not summary.failures and len(summary.outcomes) == 24
    assert peak == {"c0": 2, "c1": 2, "c2": 2, "c3": 2}  # never more than 2 on one cluster
    assert peak_total[0] == 8  # and the four clusters at the same time
    assert started[steps[5].address] >= ended[steps[0].address]


def test_once_a_record_cannot_be_written_no_further_step_starts() -> None:
    class FailsLater(MemoryStore):
        def persist(self, state: State) -> State:
            if self.writes:  # the plan's intents were written; the first record write fails
                raise StateError("cannot write state: disk full")
            return super().persist(state)

    started: list[Address] = []

    class Recording(Executor):
        def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
            started.append(step.address)
            return super().execute(step, progress)

    store = FailsLater()
    plan = _plan(5, deps=lambda i: (_address(i - 1),) if i else ())  # a chain: one step at a time
    with pytest.raises(StateError, match="disk full"):
        walk_plan(plan, Recording(pause=0.05), StateRecorder(store, None, "demo", interval=0.0), parallelism=1)
    assert len(started) <= 2  # the run stopped once the first record write failed
    assert {e.address for e in store.writes[0].journal} == {s.address for s in plan.steps}  # all re-read next time
