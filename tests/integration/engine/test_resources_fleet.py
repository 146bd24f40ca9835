"""The engine end to end on the lab's 3 real clusters, driven through the CLI like a user would.

Each test owns a fleet with a unique name (and so a unique ownership label and namespace), made of
the generic `resources` stack only (`stack: none`), and destroys it afterwards.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetplan.live.clusters import KubeCluster
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.live.reading import selector

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
KINDS = [("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"),
         ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
         ("apps/v1", "Deployment")]

APP = """\
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{color: {color}, size: "3"}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: robot, namespace: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, image: "registry.example/web:1.0"}}]
"""
RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get, list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: robot-reads, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{kind: ServiceAccount, name: robot, namespace: {ns}}}]
"""


class FleetDir:
    """A fleet file plus manifests in a temp dir, and the CLI run against it."""

    def __init__(self, root: Path, lab: Any) -> None:
        self.root = root
        self.name = "e" + uuid.uuid4().hex[:8]
        self.ns = self.name + "-ns"
        self.lab = lab
        (root / "extras").mkdir()
        c = lab.clusters
        members = "\n".join(f"    - {{name: {m.name}, kubeconfig: {m.kubeconfig}, context: {m.context}}}"
                            for m in c[1:3])
        (root / "fleet.yaml").write_text(f"""\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata: {{name: {self.name}}}
spec:
  stack: none
  leader: {{name: {c[0].name}, kubeconfig: {c[0].kubeconfig}, context: {c[0].context}}}
  members:
{members}
  wait: {{timeout: 60s}}
  resources:
    - {{clusters: all, path: ./extras/}}
""")
        self.write(color="blue", rbac=True)
        self.clusters = {cl.name: KubeCluster(ClusterAccess(cl.name, cl.kubeconfig, cl.context)) for cl in c[:3]}

    def write(self, *, color: str, rbac: bool) -> None:
        (self.root / "extras" / "app.yaml").write_text(APP.format(ns=self.ns, color=color))
        rbac_file = self.root / "extras" / "rbac.yaml"
        if rbac:
            rbac_file.write_text(RBAC.format(ns=self.ns))
        elif rbac_file.exists():
            rbac_file.unlink()

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "fleetplan", *args]

    def run(self, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), cwd=self.root, env=_env(), capture_output=True, text=True,
                              timeout=300)
        if check is not None:
            assert done.returncode == check, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def plan_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("plan", "--json").stdout)
        return doc

    def owned_live(self) -> set[str]:
        found = set()
        for name, cluster in self.clusters.items():
            for api_version, kind in KINDS:
                for obj in cluster.list(api_version, kind, "", selector(self.name)):
                    found.add(f"{name}/{kind}/{obj['metadata'].get('namespace', '-')}/{obj['metadata']['name']}")
        return found

    def state(self) -> dict[str, Any]:
        path = self.root / "state" / f"{self.name}.json"
        return json.loads(path.read_text()) if path.exists() else {"resources": []}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("FLEETPLAN_DEBUG", None)
    return env


@pytest.fixture
def fleet(tmp_path: Path, lab: Any) -> Iterator[FleetDir]:
    made = FleetDir(tmp_path, lab)
    yield made
    made.run("destroy", "--auto-approve", check=None)


def _changes(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["address"]: (c["action"], c["reason"]) for c in doc["resource_changes"] if c["action"] != "no-op"}


def test_apply_from_scratch_then_no_changes(fleet: FleetDir) -> None:
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
    state = LocalStateStore(fleet.root / "state" / f"{fleet.name}.json").read()
    plan = planning.plan_fleet(desired, clusters, state)
    assert not plan.has_changes
    for cluster in clusters.values():
        # 6 LISTs + 3 discoveries (v1, apps/v1, rbac/v1) + 5 dry-runs of existing namespaced objects + 1 ns
        assert cluster.requests <= 6 + 3 + 6, cluster.requests


def test_edit_drift_removal_and_unowned(fleet: FleetDir, lab_client: Any) -> None:
    from kubernetes import client

    fleet.run("apply", "--auto-approve")
    fleet.write(color="green", rbac=True)
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

    fleet.write(color="green", rbac=False)
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


def test_destroy_leaves_nothing(fleet: FleetDir) -> None:
    fleet.run("apply", "--auto-approve")
    assert fleet.owned_live()
    fleet.run("destroy", "--auto-approve")
    assert fleet.owned_live() == set()
    assert fleet.state()["resources"] == []
    assert fleet.run("plan", "--destroy", "--detailed-exitcode").returncode == 0


def test_concurrent_apply_is_refused_naming_the_holder(fleet: FleetDir) -> None:
    from fleetplan.state.storing import LocalStateStore

    store = LocalStateStore(fleet.root / "state" / f"{fleet.name}.json")
    with store.locked("apply") as held:
        refused = fleet.run("apply", "--auto-approve", check=4)
        assert f"pid {os.getpid()}" in refused.stderr and held.id in refused.stderr
    fleet.run("apply", "--auto-approve")


def test_stale_plans_are_refused(fleet: FleetDir) -> None:
    fleet.run("plan", "-out", "first.plan")
    fleet.run("apply", "first.plan")
    replay = fleet.run("apply", "first.plan", check=1)
    assert "no state existed" in replay.stderr
    fleet.write(color="red", rbac=True)
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
def test_sigkill_at_a_random_step_resumes_to_the_clean_end_state(fleet: FleetDir, trial: int) -> None:
    rng = random.Random(trial)
    process = subprocess.Popen(fleet.command("apply", "--auto-approve"), cwd=fleet.root, env=_env(),
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


def test_an_unreachable_member_fails_alone_and_the_others_converge(fleet: FleetDir, tmp_path: Path) -> None:
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
