"""`StateRecorder`: the hook that journals intent before any side effect and writes the state as
steps finish, with group commit.

Invariants (DESIGN section 5):
- Intent before side effect: before the first step starts, the intent (address, action, run id) of
  every step of the plan that has side effects is added to the journal and the state is written
  (one write for the whole plan, so no step waits for the disk before its side effect). A step
  started without a planned intent (hooks driven by hand) is journaled when it starts and its
  `before_side_effect` waits until that is written.
- When a step finishes OK its record is updated (or removed for a delete) and its entry dropped; a
  skipped step's entry is dropped too (it never started). A failed step keeps its entry: its side
  effect may have happened, so the next plan re-reads that address. So does every step of a run
  that dies: an entry means "may have happened", and the next plan re-reads the address, adopting
  an object the server accepted and creating one it never saw.
- Group commit: one writer thread persists the whole state whenever it changed, at most every
  `interval` seconds unless someone waits (`flush`), so many finished steps share one write.
  A record not yet written when the process dies leaves its entry in the journal (the same case
  as a kill between the side effect and the record). Each persist is atomic and bumps the serial
  (the store does both).
- A write that fails is raised to whoever waits for it, to every step about to start (so nothing
  more starts once the state cannot be written) and by `plan_finished`; the first write (the
  plan's intents) happens in `plan_starting`, so if it fails no step starts.
- Only hashes of secret outputs are recorded.
- How each cluster was reached (`plan.clusters`: paths and names, no credentials) is recorded for
  the clusters that hold recorded or journaled objects, so a later plan can still delete objects
  on a cluster that has left the fleet.
- Journal and records live in dicts while a plan runs (a step costs O(1), not a copy of the state).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Hook, Outcome, Status
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.state.model import JournalEntry, ResourceRecord, State, secret_hash
from fleetplan.state.storing import StateStore


class StateRecorder(Hook):
    def __init__(self, store: StateStore, state: State | None, fleet: str, *, interval: float = 0.05) -> None:
        self.store = store
        base = state if state is not None else State.new(fleet)
        self.run_id = str(uuid.uuid4())
        self._interval = interval
        self._mode = Mode.NORMAL
        # How every cluster of the plan is reached; each write keeps those that hold objects.
        self._accesses: dict[str, Any] = dict(base.clusters)
        # Guarded by `_cond`: the state as parts, change and write counters, waiters, errors.
        self._cond = threading.Condition()
        self._base = replace(base, resources={}, journal=())  # lineage, serial, outputs, ...
        self._resources: dict[Address, ResourceRecord] = dict(base.resources)
        self._journal: dict[Address, JournalEntry] = {e.address: e for e in base.journal}
        self._late: set[Address] = set()  # journaled at step start, not by plan_starting
        self._changed = 0  # changes made so far
        self._durable = 0  # changes covered by the last completed write
        self._waiting = 0  # callers of flush() waiting now: the writer does not pause for them
        self._error: BaseException | None = None
        self._stopping = False
        self._writer: threading.Thread | None = None

    @property
    def state(self) -> State:
        """The state as recorded so far (written or not)."""
        with self._cond:
            return self._assembled()

    def plan_starting(self, plan: Plan) -> None:
        with self._cond:
            self._mode = plan.mode
            if plan.lineage is None and plan.new_lineage and self._base.serial == 0:
                # The first state takes the lineage the plan wrote into the objects' annotations.
                self._base = replace(self._base, lineage=plan.new_lineage)
            if self._mode != Mode.REFRESH_ONLY:
                self._accesses = {**self._accesses, **{n: a.as_dict() for n, a in plan.clusters.items()}}
            # The plan accounts for what earlier runs left unfinished at the addresses it plans; an
            # unknown step (its cluster was not read) accounts for nothing: that entry stays.
            for step in plan.steps:
                if step.action != Action.UNKNOWN and self._journal.pop(step.address, None) is not None:
                    self._changed += 1
            now = _now()
            for step in plan.steps:
                if self._journals(step):
                    self._journal[step.address] = self._entry(step, now)
                    self._changed += 1
        self.flush()  # the plan's intents are durable before any step starts
        self._writer = threading.Thread(target=self._write_loop, name="fleetplan-state-writer", daemon=True)
        self._writer.start()

    def step_starting(self, step: Step) -> None:
        if not self._journals(step):
            return
        with self._cond:
            if step.address not in self._journal:
                self._journal[step.address] = self._entry(step, _now())
                self._late.add(step.address)
                self._changed += 1
                self._cond.notify_all()

    def before_side_effect(self, step: Step) -> None:
        with self._cond:
            if self._error is not None:  # the state cannot be written: start nothing more
                raise self._error
            late = step.address in self._late
        if late:
            self.flush()

    def step_finished(self, outcome: Outcome) -> None:
        if outcome.status == Status.FAILED:
            return
        with self._cond:
            self._late.discard(outcome.step.address)
            if self._recorded(outcome):
                self._changed += 1
                self._cond.notify_all()

    def plan_finished(self, summary: ApplySummary) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._writer is not None:
            self._writer.join()
        self.flush()

    def flush(self) -> None:
        """Block until every change made so far is written; raise the error of a failed write."""
        with self._cond:
            wanted = self._changed
            self._waiting += 1
            self._cond.notify_all()
            try:
                while self._durable < wanted and self._error is None:
                    if self._writer is None or not self._writer.is_alive():
                        self._write_locked()  # no writer thread (before plan_starting, after plan_finished)
                    else:
                        self._cond.wait()
            finally:
                self._waiting -= 1
            if self._error is not None:
                raise self._error

    # -- group commit --------------------------------------------------------------------------

    def _journals(self, step: Step) -> bool:
        return (
            self._mode != Mode.REFRESH_ONLY
            and step.action.has_side_effects
            and not step.options.get("forget")
        )

    def _entry(self, step: Step, now: str) -> JournalEntry:
        return JournalEntry(step.address, step.action.value, self.run_id, now, step.api_version)

    def _assembled(self) -> State:
        return replace(self._base, resources=dict(self._resources), journal=tuple(self._journal.values()))

    def _write_loop(self) -> None:
        last = 0.0
        with self._cond:
            while self._error is None:
                if self._durable == self._changed:
                    if self._stopping:
                        return
                    self._cond.wait()
                    continue
                pause = last + self._interval - time.monotonic()
                if pause > 0 and not self._waiting and not self._stopping:
                    self._cond.wait(pause)  # let more finished steps join this write
                    continue
                self._write_locked()
                last = time.monotonic()

    def _write_locked(self) -> None:
        """Write the state as it is now; called with `_cond` held, which is released while the store
        writes so steps keep recording meanwhile."""
        target = self._changed
        snapshot = self._assembled().with_clusters(self._accesses).pruned_clusters()
        self._cond.release()
        try:
            written = self.store.persist(snapshot)
        except BaseException as err:  # raised to every waiter and by plan_finished
            self._cond.acquire()
            self._error = err
            self._cond.notify_all()
            return
        self._cond.acquire()
        self._base = replace(self._base, serial=written.serial, lineage=written.lineage)
        self._durable = target
        self._cond.notify_all()

    def _recorded(self, outcome: Outcome) -> bool:
        """Apply a finished (OK or skipped) step to the records; called with `_cond` held. True when
        anything changed."""
        step = outcome.step
        changed = self._journal.pop(step.address, None) is not None
        if outcome.status != Status.OK:  # skipped: it never started
            return changed
        record = self._resources.get(step.address)
        if self._mode == Mode.REFRESH_ONLY:
            if step.action != Action.READ:
                return changed
            if step.live_uid is None:
                return self._resources.pop(step.address, None) is not None or changed
            self._resources[step.address] = (
                replace(record, uid=step.live_uid) if record else self._record(step, None)
            )
        elif step.action == Action.DELETE:
            return self._resources.pop(step.address, None) is not None or changed
        elif step.action == Action.NOOP:
            object_backed = step.live_uid is not None
            if not (object_backed and (record is None or record.uid != step.live_uid)):
                return changed
            self._resources[step.address] = self._record(step, None)
        else:
            self._resources[step.address] = self._record(step, outcome)
        return True

    def _record(self, step: Step, outcome: Outcome | None) -> ResourceRecord:
        result = outcome.result if outcome else None
        return ResourceRecord(
            address=step.address,
            api_version=step.api_version,
            handler=step.handler,
            uid=(result.uid if result and result.uid else step.live_uid),
            applied_hash=step.body_hash,
            depends_on=step.graph_dependencies,
            outputs=dict(result.outputs) if result else {},
            secret_hashes={k: secret_hash(v) for k, v in (result.secrets if result else {}).items()},
            updated_at=_now(),
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
