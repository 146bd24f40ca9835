"""The engine end to end on the lab's 3 real clusters, driven through the CLI like a user would.

Each test owns a fleet (the shared kit's `ResourcesFleet`) with a unique name (and so a unique
ownership label and namespace), made of the generic `resources` stack only (`stack: none`), and
destroys it afterwards.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kit.fleets import ResourcesFleet, cli_env

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(tmp_path: Path, lab: Any) -> Iterator[ResourcesFleet]:
    made = ResourcesFleet(tmp_path, lab, prefix="e")
    yield made
    made.destroy()


def _changes(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["address"]: (c["action"], c["reason"]) for c in doc["resource_changes"] if c["action"] != "no-op"}


def test_apply_from_scratch_then_no_changes(fleet: ResourcesFleet) -> None:
    first = fleet.plan_json()
    assert first["summary"] == {"add": 18, "change": 0, "destroy": 0}
    fleet.run("apply", "--auto-approve")
    assert len(fleet.owned_live()) == 18
    again = fleet.run("plan", "--detailed-exitcode", check=0)
    assert "No changes. Your fleet matches the configuration." in again.stdout
    # A converged fleet is read with LISTs only: per cluster, one LIST per (kind, namespace) plus
    # discovery of each group version, and no GET.
    from fleetplan.config.loading import load_fleet
    from fleetplan.plan import fleets, planning
    from fleetplan.state.storing import LocalStateStore

    loaded = load_fleet(fleet.root / "fleet.yaml")
    desired = fleets.desired_for(loaded, ("resources",))
    clusters = fleets.connect(fleets.accesses_for(loaded))
    state = LocalStateStore(fleet.state_path).read()
    plan = planning.plan_fleet(desired, clusters, state)
    assert not plan.has_changes
    for cluster in clusters.values():
        # 6 LISTs + 3 discoveries (v1, apps/v1, rbac/v1) + 5 dry-runs of existing namespaced objects + 1 ns
        assert cluster.requests <= 6 + 3 + 6, cluster.requests


def test_edit_drift_removal_and_unowned(fleet: ResourcesFleet, lab_client: Any) -> None:
    from kubernetes import client

    fleet.run("apply", "--auto-approve")
    fleet.write_manifests(color="green", rbac=True)
    changes = _changes(fleet.plan_json())
    assert set(changes) == {f"{c}/core/ConfigMap/{fleet.ns}/settings" for c in ("c1", "c2", "c3")}
    doc = fleet.plan_json()
    paths = {ch["path"] for rc in doc["resource_changes"] if rc["action"] == "update" for ch in rc["changes"]}
    assert paths == {"data.color"}
    fleet.run("apply", "--auto-approve")

    fleet.clusters["c2"].delete("v1", "ServiceAccount", fleet.ns, "robot")
    assert _changes(fleet.plan_json()) == {
        f"c2/core/ServiceAccount/{fleet.ns}/robot": ("create", "deleted outside fleetplan; re-create")}
    fleet.run("apply", "--auto-approve")

    fleet.write_manifests(color="green", rbac=False)
    removed = _changes(fleet.plan_json())
    assert {a for a, (action, _) in removed.items() if action == "delete"} == {
        f"{c}/rbac.authorization.k8s.io/{k}/{fleet.ns}/{n}"
        for c in ("c1", "c2", "c3") for k, n in (("Role", "reader"), ("RoleBinding", "robot-reads"))}
    fleet.run("apply", "--auto-approve")
    assert not any("/Role" in a for a in fleet.owned_live())

    # An object with the same name that fleetplan did not create: reported, left alone.
    core = client.CoreV1Api(lab_client(fleet.lab["c3"]))
    core.create_namespaced_config_map(fleet.ns, {"metadata": {"name": "stray"}, "data": {"mine": "yes"}})
    (fleet.root / "extras" / "stray.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: stray, namespace: {fleet.ns}}}\ndata: {{mine: no}}\n")
    doc = fleet.plan_json()
    expected = {f"{c}/core/ConfigMap/{fleet.ns}/stray": ("create", "not on the cluster") for c in ("c1", "c2")}
    assert _changes(doc) == expected
    assert any("not created by this fleet" in d["summary"] for d in doc["diagnostics"])
    fleet.run("apply", "--auto-approve")
    fleet.run("destroy", "--auto-approve")
    left = core.read_namespaced_config_map("stray", fleet.ns) if _exists(core, fleet.ns) else None
    assert left is None or left.data == {"mine": "yes"}


def _exists(core: Any, ns: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespace(ns)
    except ApiException:
        return False
    return True


def test_destroy_leaves_nothing(fleet: ResourcesFleet) -> None:
    fleet.run("apply", "--auto-approve")
    assert fleet.owned_live()
    fleet.run("destroy", "--auto-approve")
    assert fleet.owned_live() == {}
    assert fleet.state()["resources"] == []
    assert fleet.run("plan", "--destroy", "--detailed-exitcode").returncode == 0


def test_concurrent_apply_is_refused_naming_the_holder(fleet: ResourcesFleet) -> None:
    from fleetplan.state.storing import LocalStateStore

    store = LocalStateStore(fleet.state_path)
    with store.locked("apply") as held:
        refused = fleet.run("apply", "--auto-approve", check=4)
        assert f"pid {os.getpid()}" in refused.stderr and held.id in refused.stderr
    fleet.run("apply", "--auto-approve")


def test_stale_plans_are_refused(fleet: ResourcesFleet) -> None:
    fleet.run("plan", "-out", "first.plan")
    fleet.run("apply", "first.plan")
    replay = fleet.run("apply", "first.plan", check=1)
    assert "no state existed" in replay.stderr
    fleet.write_manifests(color="red", rbac=True)
    fleet.run("plan", "-out", "second.plan")
    fleet.clusters["c1"].delete("v1", "ConfigMap", fleet.ns, "settings")
    moved = fleet.run("apply", "second.plan", check=1)
    assert "clusters changed since the plan was made" in moved.stderr
    fleet.run("plan", "-out", "third.plan")
    fleet.run("apply", "--auto-approve")
    stale = fleet.run("apply", "third.plan", check=1)
    assert "serial" in stale.stderr


TRIALS = 20 if os.environ.get("FLEETPLAN_FULL") else 3


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigkill_at_a_random_step_resumes_to_the_clean_end_state(fleet: ResourcesFleet, trial: int) -> None:
    rng = random.Random(trial)
    process = subprocess.Popen(fleet.command("apply", "--auto-approve"), cwd=fleet.root, env=cli_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.8, 3.0))
    process.send_signal(signal.SIGKILL)
    process.wait()
    fleet.run("apply", "--auto-approve")
    assert fleet.run("plan", "--detailed-exitcode").returncode == 0
    addresses = {r["address"] for r in fleet.state()["resources"]}
    assert len(addresses) == 18 and fleet.state()["journal"] == []
    assert len(fleet.owned_live()) == 18


def _closed_port_kubeconfig(lab_cluster: Any, path: Path) -> Path:
    """A copy of the cluster's kubeconfig whose server is a loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    text = Path(lab_cluster.kubeconfig).read_text()
    assert lab_cluster.server in text
    path.write_text(text.replace(lab_cluster.server, f"https://127.0.0.1:{port}"))
    return path


def test_an_unreachable_member_fails_alone_and_the_others_converge(fleet: ResourcesFleet, tmp_path: Path) -> None:
    c3 = fleet.lab["c3"]
    good = (fleet.root / "fleet.yaml").read_text()
    dark = _closed_port_kubeconfig(c3, tmp_path / "dark.kubeconfig")
    (fleet.root / "fleet.yaml").write_text(good.replace(f"kubeconfig: {c3.kubeconfig},", f"kubeconfig: {dark},"))

    planned = fleet.run("plan", check=1)
    assert "Error: cluster c3 unreachable" in planned.stdout and "cluster c3 unreachable" in planned.stderr
    assert f"? c3/core/Namespace/-/{fleet.ns}" in planned.stdout
    assert "12 to add" in planned.stdout and "6 unknown" in planned.stdout

    done = fleet.run("apply", "--auto-approve", check=1)
    assert "c3/fleetplan.dev/Cluster/-/c3: error: cluster c3 unreachable" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    live = fleet.owned_live()
    assert len(live) == 12 and not any(a.startswith("c3/") for a in live)
    recorded = {r["address"] for r in fleet.state()["resources"]}
    assert len(recorded) == 12 and not any(a.startswith("c3/") for a in recorded)
    assert fleet.state()["journal"] == []

    (fleet.root / "fleet.yaml").write_text(good)  # reachable again: it converges, then nothing to do
    fleet.run("apply", "--auto-approve")
    assert len(fleet.owned_live()) == 18
    fleet.run("plan", "--detailed-exitcode", check=0)
