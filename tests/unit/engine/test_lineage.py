"""Ownership rests on the state, not on the labels alone: two states of fleets with the same name
share the labels, so an object is adopted, updated or deleted only when this state created it
(its recorded uid, or its lineage annotation), and deletes are preconditioned on the recorded uid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetplan.addrs import Address
from fleetplan.apply.recording import StateRecorder
from fleetplan.graph.building import build_graph
from fleetplan.live import reading
from fleetplan.plan import deciding, planfile
from fleetplan.plan.model import Action, Mode, Plan
from fleetplan.stacks.desired import DesiredFleet, DesiredResource
from fleetplan.state import model
from fleetplan.state.storing import LocalStateStore

CM = Address.parse("west/core/ConfigMap/apps/settings")
BODY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "apps"},
        "data": {"color": "blue"}}
DESIRED = DesiredFleet("demo", (DesiredResource(CM, BODY),))


def _live(uid: str, lineage: str | None) -> dict[str, Any]:
    return {**reading.owned_body(BODY, "demo", lineage), "metadata": {
        **reading.owned_body(BODY, "demo", lineage)["metadata"], "uid": uid}}


def _plan(state: model.State | None, live: dict[str, Any] | None, *, mode: Mode = Mode.NORMAL,
          desired: DesiredFleet = DESIRED, new_lineage: str | None = None) -> Plan:
    snapshot = reading.Snapshot({CM: live} if live else {})
    return deciding.decide(desired, build_graph(desired.resources), state, snapshot, lambda _a, body: body,
                           deciding.Options(mode=mode, new_lineage=new_lineage))


def _state(lineage: str, uid: str | None = None) -> model.State:
    state = model.State(lineage=lineage, fleet="demo", serial=3)
    return state.with_record(model.ResourceRecord(CM, "v1", uid=uid)) if uid else state


def test_bodies_carry_the_state_lineage_and_the_first_state_takes_the_plans(tmp_path: Path) -> None:
    first = _plan(None, None, new_lineage="lineage-new")
    step = first.step(CM)
    assert step is not None and step.body is not None
    assert step.body["metadata"]["annotations"] == {reading.LINEAGE_ANNOTATION: "lineage-new"}
    assert first.new_lineage == "lineage-new"
    planfile.save(first, tmp_path / "p")
    assert planfile.load(tmp_path / "p").new_lineage == "lineage-new"
    store = LocalStateStore(tmp_path / "state.json")
    recorder = StateRecorder(store, None, "demo")
    recorder.plan_starting(first)
    recorder.step_starting(step)
    recorder.before_side_effect(step)  # returns once the intent is written
    saved = store.read()
    assert saved is not None and saved.lineage == "lineage-new"


def test_another_states_object_with_the_same_labels_is_neither_adopted_nor_deleted() -> None:
    theirs = _live("uid-b", "lineage-b")
    mine = _state("lineage-a")  # this state records nothing at that address
    plan = _plan(mine, theirs)
    step = plan.step(CM)
    assert step is not None and step.action == Action.NOOP and step.live_uid is None
    assert "created by another state" in step.reason
    assert any("not created by this state" in w.summary for w in plan.warnings)
    assert _plan(mine, theirs, mode=Mode.DESTROY).step(CM) is None
    journaled = mine.journaled(model.JournalEntry(CM, "create", "run", "t", "v1"))
    removed = _plan(journaled, theirs, desired=DesiredFleet("demo", ()))
    assert removed.step(CM) is None  # a journal entry alone does not make it ours


def test_a_recorded_object_recreated_by_someone_else_is_only_dropped_from_the_state() -> None:
    state = _state("lineage-a", uid="uid-1")
    recreated = _live("uid-2", None)
    removal = _plan(state, recreated, desired=DesiredFleet("demo", ())).step(CM)
    assert removal is not None and removal.action == Action.DELETE
    assert removal.options == {"forget": True} and "re-created outside this state" in removal.reason
    update = _plan(state, {**recreated, "data": {"color": "red"}}).step(CM)
    assert update is not None and update.action == Action.NOOP


def test_deletes_are_preconditioned_on_the_recorded_uid_or_the_lineage() -> None:
    recorded = _plan(_state("lineage-a", uid="uid-1"), _live("uid-1", "lineage-a"),
                     desired=DesiredFleet("demo", ())).step(CM)
    assert recorded is not None and recorded.action == Action.DELETE and recorded.live_uid == "uid-1"
    assert recorded.options == {}
    # Re-created by this state in a run killed before it recorded the new uid: ours by lineage.
    crashed = _plan(_state("lineage-a", uid="uid-1"), _live("uid-2", "lineage-a"),
                    desired=DesiredFleet("demo", ())).step(CM)
    assert crashed is not None and crashed.options == {} and crashed.live_uid == "uid-2"
    # A journaled create of this state, not recorded yet, is adopted.
    journaled = _state("lineage-a").journaled(model.JournalEntry(CM, "create", "run", "t", "v1"))
    adopted = _plan(journaled, _live("uid-3", "lineage-a")).step(CM)
    assert adopted is not None and adopted.live_uid == "uid-3"
    assert adopted.reason in ("adopt: created by an interrupted run", "finish an interrupted run")
