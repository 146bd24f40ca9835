"""Objects on a cluster that left the fleet stay reachable, and `--force` reaches delete handlers.

A cluster removed from fleet.yaml (an OCM spoke, an Antrea member) still holds what fleetplan
created there; the state records how it was reached, so the next plan can connect to it and delete
those objects instead of failing with "no connection" or orphaning them.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleetplan.addrs import Address
from fleetplan.apply.recording import StateRecorder
from fleetplan.graph.building import build_graph
from fleetplan.live import reading
from fleetplan.live.clusters import KubeCluster
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.plan import planning
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import DesiredFleet, DesiredResource
from fleetplan.state import model
from fleetplan.state.storing import LocalStateStore

GONE = Address.parse("west/core/ConfigMap/apps/settings")
KEPT = Address.parse("hub/core/ConfigMap/apps/settings")


def _kubeconfig(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": name, "user": {"token": "not-used"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}))
    return path


def _state(tmp: Path, kubeconfig: Path | None) -> model.State:
    state = model.State.new("demo")
    for address in (GONE, KEPT):
        state = state.with_record(model.ResourceRecord(address, "v1", uid="u"))
    if kubeconfig is not None:
        state = state.with_clusters({"west": ClusterAccess("west", str(kubeconfig), "west").as_dict()})
    return state


def test_a_cluster_that_left_the_fleet_is_reached_as_the_state_recorded(tmp_path: Path) -> None:
    state = _state(tmp_path, _kubeconfig(tmp_path, "west"))
    clusters, accesses, problems = planning._with_retired_clusters({}, {}, state)
    assert problems == {}
    assert isinstance(clusters["west"], KubeCluster) and clusters["west"].name == "west"
    assert accesses is not None and accesses["west"].context == "west"
    # A cluster the fleet still names is connected by the caller, never replaced.
    mine = {"west": clusters["west"]}
    assert planning._with_retired_clusters(mine, {}, state)[0] is mine


def test_an_unreachable_retired_cluster_is_a_clear_error_and_stops_only_itself(tmp_path: Path) -> None:
    state = _state(tmp_path, tmp_path / "missing.kubeconfig")
    _, _, problems = planning._with_retired_clusters({}, {}, state)
    diagnostic = problems["west"]
    assert "west left the fleet" in diagnostic.summary and "does not exist" in diagnostic.summary
    assert "state rm" in (diagnostic.hint or "")
    # The plan goes on without it: its records are unknown (kept), the reason is the plan's error.
    desired = DesiredFleet("demo", ())
    plan = planning.plan_fleet(desired, {}, model.State.new("demo").with_record(
        model.ResourceRecord(GONE, "v1", uid="u")).with_clusters(state.clusters))
    assert {s.address: s.action for s in plan.steps}[GONE] == Action.UNKNOWN
    assert "cluster west unreachable: left the fleet" in plan.errors[0].summary
    assert "state rm" in (plan.errors[0].hint or "")


def test_the_recorder_keeps_how_clusters_were_reached_while_they_hold_objects(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "state.json")
    accesses = {n: ClusterAccess(n, f"/k/{n}", n) for n in ("hub", "west")}
    steps = (Step(KEPT, Action.CREATE, "t", api_version="v1"), Step(GONE, Action.CREATE, "t", api_version="v1"))
    # A plan with steps on hub only: west is reachable but holds nothing, so it is not written.
    only_hub = StateRecorder(store, None, "demo")
    only_hub.plan_starting(Plan("demo", Mode.NORMAL, steps[:1], None, 0, "", clusters=accesses))
    saved = store.read()  # the plan's intents are written before any step starts
    assert saved is not None and [e.address for e in saved.journal] == [KEPT]
    assert set(saved.clusters) == {"hub"}
    assert saved.clusters["hub"] == {"name": "hub", "kubeconfig": "/k/hub", "context": "hub", "caSha256": None}
    # A plan with a step on west journals its intent up front: west is kept from then on.
    recorder = StateRecorder(store, saved, "demo")
    recorder.plan_starting(Plan("demo", Mode.NORMAL, steps, saved.lineage, saved.serial, "", clusters=accesses))
    saved = store.read()
    assert saved is not None and set(saved.clusters) == {"hub", "west"}
    assert model.from_dict(json.loads(model.dumps(saved)), source="t").clusters == saved.clusters
    # A later run whose fleet no longer names west keeps how west was reached while it holds objects.
    later = StateRecorder(store, saved, "demo")
    later.plan_starting(Plan("demo", Mode.NORMAL, (steps[0],), None, 0, "", clusters={"hub": accesses["hub"]}))
    again = store.read()
    assert again is not None and again.clusters["west"]["kubeconfig"] == "/k/west"


def test_force_reaches_every_delete_step(tmp_path: Path) -> None:
    desired = DesiredFleet("demo", (DesiredResource(KEPT, {"apiVersion": "v1", "kind": "ConfigMap"}),))
    state = _state(tmp_path, None)
    snapshot = reading.Snapshot({GONE: {"metadata": {"uid": "u"}}, KEPT: {"metadata": {"uid": "u"}}})

    def deletes(force: bool) -> dict[str, object]:
        plan = planning.decide(desired, build_graph(desired.resources), state, snapshot,
                               lambda _a, body: body, planning.Options(force=force))
        return {str(s.address): dict(s.options) for s in plan.steps if s.action == Action.DELETE}

    assert deletes(False) == {str(GONE): {}}
    assert deletes(True) == {str(GONE): {"force": True}}
