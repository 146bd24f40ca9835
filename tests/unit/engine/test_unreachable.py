"""One unreachable cluster does not stop the others (DESIGN section 5), with small fake clusters.

Planning reads every cluster it can; the one it cannot read gets unknown steps behind one root
step per cluster. Applying that plan fails the root with "cluster X unreachable: <reason>", skips
what depends on it (on any cluster), converges the rest, and the state records exactly that.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.fakes import MemoryCluster

from fleetplan.addrs import Address
from fleetplan.apply.executing import ClusterExecutor
from fleetplan.apply.hooks import Status
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import walk_plan
from fleetplan.errors import ClusterError
from fleetplan.live.clusters import Obj, ResourceInfo
from fleetplan.plan import planning, rendering, unknowns
from fleetplan.plan.model import Action, Mode
from fleetplan.stacks.desired import DesiredFleet, DesiredResource, Ref
from fleetplan.state import model
from fleetplan.state.storing import LocalStateStore

SETTINGS = Address.parse("good/core/ConfigMap/apps/settings")
COPY = Address.parse("good/core/ConfigMap/apps/copy")  # takes a value from the dark cluster
DARK = Address.parse("dark/core/ConfigMap/apps/settings")
DARK_OLD = Address.parse("dark/core/ConfigMap/apps/old")  # recorded, no longer configured
ROOT = unknowns.root_address("dark")


def _cm(address: Address, data: Mapping[str, Any]) -> DesiredResource:
    return DesiredResource(address, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": address.name, "namespace": address.namespace},
                                     "data": dict(data)})


class GoodCluster(MemoryCluster):
    def __init__(self) -> None:
        super().__init__("good")


class DarkCluster(GoodCluster):
    name = "dark"

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None:
        raise ClusterError("cluster dark: connection failed: ConnectionRefusedError: [Errno 111] refused")

    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        raise AssertionError("nothing may be sent to a cluster that could not be read")


def _fleet() -> DesiredFleet:
    return DesiredFleet("demo", (
        _cm(SETTINGS, {"color": "blue"}),
        _cm(DARK, {"color": "blue"}),
        _cm(COPY, {"uid": Ref(DARK, "metadata.uid", sensitive=False)}),
    ))


def _state() -> model.State:
    return model.State.new("demo").with_record(model.ResourceRecord(DARK_OLD, "v1", uid="uid-old"))


def test_the_readable_clusters_are_planned_and_the_unreadable_one_is_unknown() -> None:
    plan = planning.plan_fleet(_fleet(), {"good": GoodCluster(), "dark": DarkCluster()}, _state())
    actions = {str(s.address): s.action for s in plan.steps}
    assert actions == {str(ROOT): Action.UNKNOWN, str(SETTINGS): Action.CREATE, str(COPY): Action.CREATE,
                       str(DARK): Action.UNKNOWN, str(DARK_OLD): Action.UNKNOWN}
    assert plan.steps[0].address == ROOT
    assert plan.steps[0].reason == "cluster dark unreachable: connection failed: ConnectionRefusedError: " \
                                   "[Errno 111] refused"
    for address in (DARK, DARK_OLD):
        assert ROOT in (plan.step(address) or plan.steps[0]).depends_on
    assert [e.address for e in plan.errors] == ["dark"]
    assert "2 step(s) are unknown" in plan.errors[0].summary
    assert plan.counts() == (2, 0, 0)  # unknown steps are neither added nor destroyed

    text = rendering.render_human(plan)
    assert "Error: cluster dark unreachable: connection failed" in text
    assert f"? {DARK}" in text and "No changes" not in text
    assert "2 to add, 0 to change, 0 to destroy. 2 unknown" in text


def test_applying_fails_the_unreachable_cluster_alone_and_records_exactly_what_happened(tmp_path: Path) -> None:
    good, dark = GoodCluster(), DarkCluster()
    state = _state()
    plan = planning.plan_fleet(_fleet(), {"good": good, "dark": dark}, state)
    store = LocalStateStore(tmp_path / "state.json")
    recorder = StateRecorder(store, state, "demo")
    summary = walk_plan(plan, ClusterExecutor(plan, {"good": good, "dark": dark}), recorder)

    assert [(str(o.step.address), o.error.summary if o.error else "") for o in summary.failures] == [
        (str(ROOT), "cluster dark unreachable: connection failed: ConnectionRefusedError: [Errno 111] refused")]
    assert {o.step.address: o.root_cause for o in summary.skipped} == {DARK: ROOT, DARK_OLD: ROOT, COPY: ROOT}
    assert next(o for o in summary.outcomes if o.step.address == SETTINGS).status == Status.OK
    assert set(good.objects) == {"settings"}
    saved = store.read()
    assert saved is not None
    assert set(saved.resources) == {SETTINGS, DARK_OLD}  # the dark record is kept, not forgotten
    assert saved.resources[DARK_OLD].uid == "uid-old" and saved.journal == ()


def test_destroy_with_an_unreachable_cluster_keeps_its_records() -> None:
    state = _state().with_record(model.ResourceRecord(SETTINGS, "v1", uid="uid-settings"))
    good = GoodCluster()
    good.apply(_fleet().resources[0].body | {"metadata": {"name": "settings", "namespace": "apps", "labels": {
        "fleetplan.dev/fleet": "demo", "app.kubernetes.io/managed-by": "fleetplan"}}})
    plan = planning.plan_fleet(_fleet(), {"good": good, "dark": DarkCluster()}, state,
                               planning.Options(mode=Mode.DESTROY))
    actions = {s.address: s.action for s in plan.steps}
    assert actions[SETTINGS] == Action.DELETE and actions[DARK_OLD] == Action.UNKNOWN
    assert plan.errors and plan.errors[0].address == "dark"
