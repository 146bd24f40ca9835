"""Controller mode on the lab: a Fleet resource converges, grows, corrects drift, and is torn down.

The management cluster (and the fleet's leader) is the lab's first cluster; members are the
others. Every test owns a namespace on the management cluster and a uniquely named fleet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import controllerkit as kit
import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(lab: Any, lab_namespace: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    management, api, namespace = kit.management_with_kubeconfigs(lab, lab_namespace)
    name = "f" + uuid.uuid4().hex[:8]
    app_ns = name + "-app"
    (tmp_path / "extras").mkdir()
    (tmp_path / "extras" / "app.yaml").write_text(kit.APP.format(ns=app_ns, color="blue"))
    controllers: list[kit.Controller] = []
    yield {"api": api, "ns": namespace, "name": name, "app_ns": app_ns, "dir": tmp_path, "lab": lab,
           "management": management, "controllers": controllers}
    for ctl in controllers:
        ctl.stop()


def _owned(lab: Any, fleet: str) -> dict[str, set[str]]:
    return {cluster.name: kit.owned_names(cluster, fleet) for cluster in lab.clusters[:3]}


def test_fleet_converges_grows_corrects_drift_and_tears_down(setup: dict[str, Any]) -> None:
    api, ns, name, lab = setup["api"], setup["ns"], setup["name"], setup["lab"]
    c1, c2, c3 = lab.clusters[:3]
    ctl = kit.Controller(setup["dir"], setup["management"], ns)
    setup["controllers"].append(ctl)
    kit.wait_for("the controller to lead", lambda: ctl.seen("leading"), 60)

    api.create(kit.fleet_body(name, ns, c1, [c2]))
    fleet = kit.wait_for("the fleet to be Ready", kit.ready_at(api, ns, name), 120)
    assert "fleetplan.dev/teardown" in fleet["metadata"]["finalizers"]
    for cluster in (c1, c2):
        cond = kit.condition(fleet, f"clusters.fleetplan.dev/{cluster.name}")
        assert cond is not None and cond["status"] == "True" and cond["reason"] == "Converged", cond
    assert kit.condition(fleet, f"clusters.fleetplan.dev/{c3.name}") is None
    assert kit.condition(fleet, "Degraded")["status"] == "False"
    assert kit.condition(fleet, "Progressing")["status"] == "False"
    assert fleet["status"]["lastPlan"]["add"] == 4, fleet["status"]["lastPlan"]
    owned = _owned(lab, name)
    assert owned[c1.name] == owned[c2.name] == {"settings", setup["app_ns"]}
    assert owned[c3.name] == set()
    state = api.get("v1", "Secret", ns, f"fleetplan-state-{name}")
    assert state is not None and "state.json.gz" in state["data"]

    # editing the spec to add a member converges that member
    body = api.get(kit.FLEET_API, "Fleet", ns, name)
    assert body is not None
    members = [*body["spec"]["members"], {"name": c3.name, "kubeconfigSecret": {"name": f"{c3.name}-kubeconfig"}}]
    patched = api.merge_patch(kit.FLEET_API, "Fleet", ns, name, {"spec": {"members": members}})
    assert patched is not None
    generation = patched["metadata"]["generation"]
    fleet = kit.wait_for("the new member to converge", kit.ready_at(api, ns, name, generation), 120)
    cond = kit.condition(fleet, f"clusters.fleetplan.dev/{c3.name}")
    assert cond is not None and cond["status"] == "True", cond
    assert _owned(lab, name)[c3.name] == {"settings", setup["app_ns"]}
    assert fleet["status"]["clusters"] == [c1.name, c2.name, c3.name]

    # drift is corrected by the periodic re-plan (resync 5s)
    member = kit.objects(c2)
    assert member.delete("v1", "ConfigMap", setup["app_ns"], "settings")
    kit.wait_for("the deleted ConfigMap to come back",
                 lambda: member.get("v1", "ConfigMap", setup["app_ns"], "settings"), 60)

    # deleting the resource tears the fleet down, then lets the resource go
    assert api.delete(kit.FLEET_API, "Fleet", ns, name)
    kit.wait_for("the Fleet to be gone", lambda: api.get(kit.FLEET_API, "Fleet", ns, name) is None, 120)
    assert _owned(lab, name) == {c1.name: set(), c2.name: set(), c3.name: set()}
    assert api.get("v1", "Secret", ns, f"fleetplan-state-{name}") is None
    assert ctl.seen("torn_down") is not None
    assert "BEGIN" not in ctl.text() and "client-key" not in ctl.text()  # no kubeconfig content logged


def test_prevent_destroy_holds_the_resource_until_lifted(setup: dict[str, Any]) -> None:
    api, ns, name, lab = setup["api"], setup["ns"], setup["name"], setup["lab"]
    c1, c2 = lab.clusters[:2]
    ctl = kit.Controller(setup["dir"], setup["management"], ns)
    setup["controllers"].append(ctl)
    api.create(kit.fleet_body(name, ns, c1, [c2], prevent=("leader",)))
    kit.wait_for("the fleet to be Ready", kit.ready_at(api, ns, name), 120)

    assert api.delete(kit.FLEET_API, "Fleet", ns, name)

    def refused() -> Any:
        obj = api.get(kit.FLEET_API, "Fleet", ns, name)
        cond = kit.condition(obj, "Degraded")
        return obj if cond and cond["status"] == "True" and cond["reason"] == "DestroyPrevented" else None

    obj = kit.wait_for("the teardown to be refused", refused, 60)
    assert "preventDestroy" in kit.condition(obj, "Degraded")["message"]
    assert _owned(lab, name)[c1.name] == {"settings", setup["app_ns"]}  # nothing deleted, leader included
    assert _owned(lab, name)[c2.name] == {"settings", setup["app_ns"]}

    # lifting the protection lets the pending deletion finish
    assert api.merge_patch(kit.FLEET_API, "Fleet", ns, name, {"spec": {"lifecycle": {"preventDestroy": []}}})
    kit.wait_for("the Fleet to be gone", lambda: api.get(kit.FLEET_API, "Fleet", ns, name) is None, 120)
    assert _owned(lab, name) == {c1.name: set(), c2.name: set(), lab.clusters[2].name: set()}


def test_missing_kubeconfig_secret_is_reported_in_status(setup: dict[str, Any]) -> None:
    api, ns, name, lab = setup["api"], setup["ns"], setup["name"], setup["lab"]
    ctl = kit.Controller(setup["dir"], setup["management"], ns)
    setup["controllers"].append(ctl)
    body = kit.fleet_body(name, ns, lab.clusters[0], [lab.clusters[1]])
    body["spec"]["members"][0]["kubeconfigSecret"]["name"] = "nowhere"
    api.create(body)

    def degraded() -> Any:
        obj = api.get(kit.FLEET_API, "Fleet", ns, name)
        cond = kit.condition(obj, "Degraded")
        return obj if cond and cond["status"] == "True" else None

    obj = kit.wait_for("the fleet to be Degraded", degraded, 60)
    assert kit.condition(obj, "Ready")["status"] == "False"
    assert kit.condition(obj, "Degraded")["reason"] == "InvalidSpec"
    member = kit.condition(obj, f"clusters.fleetplan.dev/{lab.clusters[1].name}")
    assert member is not None and member["status"] == "False"
    assert f"{ns}/nowhere does not exist" in member["message"]
    assert _owned(lab, name)[lab.clusters[0].name] == set()  # nothing applied anywhere
    # the finalizer lets an invalid fleet be deleted once its kubeconfig is fixed; here, drop it
    api.merge_patch(kit.FLEET_API, "Fleet", ns, name, {"metadata": {"finalizers": []}})
    api.delete(kit.FLEET_API, "Fleet", ns, name)
