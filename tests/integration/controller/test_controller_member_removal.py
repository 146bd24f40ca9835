"""Controller mode on the lab: a member removed from a Fleet's spec is reached through its kubeconfig
Secret (recorded in the state as a reference, never a path) and its objects are deleted; with
the Secret gone too, the Fleet says which Secret it needs, and recreating it finishes the job.

The controller runs with its own TMPDIR, so the test also sees that kubeconfig material stays in
the process's private directory and is gone when the controller stops."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import controllerkit as kit
import pytest

from fleetplan.plan.stores import kubernetes_store
from fleetplan.state.model import State

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(lab: Any, lab_namespace: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    management, api, namespace = kit.management_with_kubeconfigs(lab, lab_namespace)
    name = "r" + uuid.uuid4().hex[:8]
    (tmp_path / "extras").mkdir()
    (tmp_path / "extras" / "app.yaml").write_text(kit.APP.format(ns=name + "-app", color="green"))
    controllers: list[kit.Controller] = []
    yield {"api": api, "ns": namespace, "name": name, "dir": tmp_path, "lab": lab, "management": management,
           "controllers": controllers}
    for ctl in controllers:
        ctl.stop()



def _state(api: Any, namespace: str, name: str) -> State:
    state = kubernetes_store(api, namespace, f"fleetplan-state-{name}", 6, check_namespace=False).read()
    assert state is not None
    return state


def _set_members(api: Any, ns: str, name: str, members: list[Any]) -> int:
    entries = [{"name": m.name, "kubeconfigSecret": {"name": f"{m.name}-kubeconfig"}} for m in members]
    patched = api.merge_patch(kit.FLEET_API, "Fleet", ns, name, {"spec": {"members": entries}})
    assert patched is not None
    return int(patched["metadata"]["generation"])


def test_a_removed_member_is_cleaned_through_its_secret(setup: dict[str, Any]) -> None:
    api, ns, name, lab = setup["api"], setup["ns"], setup["name"], setup["lab"]
    c1, c2, c3 = lab.clusters[:3]
    app = {"settings", name + "-app"}
    tmpdir = setup["dir"] / "controller-tmp"
    tmpdir.mkdir()
    ctl = kit.Controller(setup["dir"], setup["management"], ns, extra_env={"TMPDIR": str(tmpdir)})
    setup["controllers"].append(ctl)
    kit.wait_for("the controller to lead", lambda: ctl.seen("leading"), 60)

    api.create(kit.fleet_body(name, ns, c1, [c2, c3]))
    kit.wait_for("the fleet to be Ready", kit.ready_at(api, ns, name), 120)
    assert kit.owned_names(c1, name) == kit.owned_names(c2, name) == kit.owned_names(c3, name) == app
    recorded = _state(api, ns, name).clusters
    for cluster in (c1, c2, c3):
        access = recorded[cluster.name]
        assert access["kubeconfigSecret"] == {"namespace": ns, "name": f"{cluster.name}-kubeconfig",
                                              "key": "kubeconfig"}, access
        assert not access.get("kubeconfig"), access  # no path to a file that will not be there next time
    # kubeconfig material exists only inside the controller's private directory
    assert [p.name for p in tmpdir.iterdir()] == [f"fleetplan-{os.getuid()}"]

    # a member removed from the spec: its objects are deleted through its (still existing) Secret
    generation = _set_members(api, ns, name, [c2])
    kit.wait_for("the fleet without c3 to be Ready", kit.ready_at(api, ns, name, generation), 120)
    assert kit.owned_names(c3, name) == set()
    assert kit.owned_names(c2, name) == app
    assert c3.name not in _state(api, ns, name).clusters

    # removed with its Secret gone: a condition names the Secret, nothing is forgotten
    assert api.delete("v1", "Secret", ns, f"{c2.name}-kubeconfig")
    generation = _set_members(api, ns, name, [])

    def names_the_secret() -> Any:
        cond = kit.condition(api.get(kit.FLEET_API, "Fleet", ns, name), "Degraded")
        return cond if cond and cond["status"] == "True" and f"{ns}/{c2.name}-kubeconfig" in cond["message"] \
            else None

    cond = kit.wait_for("a condition naming the missing Secret", names_the_secret, 90)
    assert f"cluster {c2.name} left the fleet" in cond["message"], cond
    assert kit.owned_names(c2, name) == app
    assert c2.name in _state(api, ns, name).clusters

    kit.kubeconfig_secret(api, ns, c2)  # restoring the Secret lets the deletion finish
    kit.wait_for("the fleet without c2 to be Ready", kit.ready_at(api, ns, name, generation), 120)
    assert kit.owned_names(c2, name) == set()
    assert kit.owned_names(c1, name) == app

    assert api.delete(kit.FLEET_API, "Fleet", ns, name)
    kit.wait_for("the Fleet to be gone", lambda: api.get(kit.FLEET_API, "Fleet", ns, name) is None, 120)
    assert kit.owned_names(c1, name) == set()
    assert "BEGIN" not in ctl.text() and "client-key" not in ctl.text()
    assert ctl.stop() == 0
    assert list((tmpdir / f"fleetplan-{os.getuid()}").iterdir()) == []
