"""`StateRecorder`: the hook that journals intent before each side effect and writes the state
after each step.

Invariants (DESIGN section 5):
- Before a step with side effects starts, its intent (address, action, run id) is added to the
  journal and the state is persisted; after it finishes OK, its record is updated (or removed for
  a delete), the journal entry dropped, and the state persisted again. Each persist is atomic and
  bumps the serial (the store does both).
- A failed step keeps its journal entry: its side effect may have happened, so the next plan
  re-reads that address.
- Only hashes of secret outputs are recorded.
- How each cluster was reached (`plan.clusters`: paths and names, no credentials) is recorded for
  the clusters that hold recorded objects, so a later plan can still delete objects on a cluster
  that has left the fleet.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fleetplan.apply.hooks import Hook, Outcome, Status
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.state.model import JournalEntry, ResourceRecord, State, secret_hash
from fleetplan.state.storing import StateStore


class StateRecorder(Hook):
    def __init__(self, store: StateStore, state: State | None, fleet: str) -> None:
        self.store = store
        self.state = state if state is not None else State.new(fleet)
        self.run_id = str(uuid.uuid4())
        self._mode = Mode.NORMAL
        # How every cluster of the plan is reached; each write keeps those that hold objects.
        self._accesses: dict[str, Any] = dict(self.state.clusters)

    def plan_starting(self, plan: Plan) -> None:
        self._mode = plan.mode
        if plan.lineage is None and plan.new_lineage and self.state.serial == 0:
            # The first state takes the lineage the plan wrote into the objects' annotations.
            self.state = replace(self.state, lineage=plan.new_lineage)
        if self._mode != Mode.REFRESH_ONLY:
            self._accesses = {**self.state.clusters, **{n: a.as_dict() for n, a in plan.clusters.items()}}
        # An unknown step (its cluster was not read) accounts for nothing: its journal entry stays.
        planned = {s.address for s in plan.steps if s.action != Action.UNKNOWN}
        stale = [e for e in self.state.journal if e.address in planned]
        if stale:  # the plan already accounts for what earlier runs left unfinished
            self.state = replace(
                self.state, journal=tuple(e for e in self.state.journal if e.address not in planned)
            )
            self._persist()

    def step_starting(self, step: Step) -> None:
        if self._mode == Mode.REFRESH_ONLY or not step.action.has_side_effects or step.options.get("forget"):
            return
        self.state = self.state.journaled(
            JournalEntry(step.address, step.action.value, self.run_id, _now(), step.api_version)
        )
        self._persist()

    def step_finished(self, outcome: Outcome) -> None:
        if outcome.status != Status.OK:
            return
        step = outcome.step
        before = self.state
        state = self.state.unjournaled(step.address)
        record = state.resources.get(step.address)
        if self._mode == Mode.REFRESH_ONLY:
            if step.action == Action.READ:
                state = (
                    state.without(step.address)
                    if step.live_uid is None
                    else state.with_record(
                        replace(record, uid=step.live_uid) if record else self._record(step, None)
                    )
                )
        elif step.action == Action.DELETE:
            state = state.without(step.address)
        elif step.action == Action.NOOP:
            object_backed = step.live_uid is not None
            if object_backed and (record is None or record.uid != step.live_uid):
                state = state.with_record(self._record(step, None))
        else:
            state = state.with_record(self._record(step, outcome))
        if state != before:
            self.state = state
            self._persist()

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

    def _persist(self) -> None:
        self.state = self.store.persist(self.state.with_clusters(self._accesses).pruned_clusters())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
