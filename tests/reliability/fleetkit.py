"""Helpers for the reliability suite: a fleet in a temp dir driven through the real CLI, the
end-state checks every crash and fault test shares, and the results the report is made from.

`ResourcesFleet` is the generic `resources` stack on the lab's 3 clusters (c1 leader, c2 and c3
members): a namespace, ConfigMap, ServiceAccount, Deployment, Role and RoleBinding on each, 18
objects in all, each carrying the fleet's ownership label. Each fleet has a unique name, so tests
never see each other's objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FULL = bool(os.environ.get("FLEETPLAN_FULL"))
OWNED_KINDS = [("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("v1", "Secret"),
               ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
               ("apps/v1", "Deployment")]

# category -> list of result rows (dicts); the session-finish hook in conftest.py writes the report.
RESULTS: dict[str, list[dict[str, Any]]] = defaultdict(list)


def record(category: str, **row: Any) -> dict[str, Any]:
    """Add a result row; returns it, so a test can complete it (e.g. `survived`) once it knows."""
    RESULTS[category].append(row)
    return row


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
---
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


def with_only(args: tuple[str, ...] | list[str]) -> list[str]:
    """Engine commands are narrowed to the `resources` stack (the fleet file names a main stack)."""
    return [*args, "--only", "resources"] if args and args[0] in ("plan", "apply", "destroy", "graph") else list(args)


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("FLEETPLAN_DEBUG", "FLEETPLAN_TEST_KILL_AT", "FLEETPLAN_TEST_HOOKS", "KUBECONFIG"):
        env.pop(name, None)
    env.update(extra or {})
    if "FLEETPLAN_TEST_KILL_AT" in env:  # the kill switch acts only with test hooks switched on
        env["FLEETPLAN_TEST_HOOKS"] = "1"
    return env


class ResourcesFleet:
    """A `resources`-stack fleet over lab clusters, with per-cluster kubeconfig overrides."""

    OBJECTS_PER_CLUSTER = 6

    def __init__(self, root: Path, lab: Any, kubeconfigs: dict[str, str] | None = None,
                 wait_timeout: str = "60s", prefix: str = "r") -> None:
        self.root = root
        self.lab = lab
        self.name = prefix + uuid.uuid4().hex[:8]
        self.ns = self.name + "-ns"
        self.cluster_names = [c.name for c in lab.clusters[:3]]
        self.kubeconfigs = {c.name: c.kubeconfig for c in lab.clusters[:3]} | (kubeconfigs or {})
        self.wait_timeout = wait_timeout
        (root / "extras").mkdir(parents=True, exist_ok=True)
        self.write_fleet()
        self.write_manifests(color="blue")

    def write_fleet(self) -> None:
        c = self.lab.clusters
        members = "\n".join(
            f"    - {{name: {m.name}, kubeconfig: {self.kubeconfigs[m.name]}, context: {m.context}}}" for m in c[1:3])
        (self.root / "fleet.yaml").write_text(f"""\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata: {{name: {self.name}}}
spec:
  stack: antrea
  version: v2.2.0
  clusterSet: {{name: {self.name}-set}}
  leader: {{name: {c[0].name}, kubeconfig: {self.kubeconfigs[c[0].name]}, context: {c[0].context}}}
  members:
{members}
  wait: {{timeout: {self.wait_timeout}}}
  resources:
    - {{clusters: all, path: ./extras/}}
""")

    def write_manifests(self, *, color: str) -> None:
        (self.root / "extras" / "app.yaml").write_text(APP.format(ns=self.ns, color=color))

    @property
    def expected_count(self) -> int:
        return self.OBJECTS_PER_CLUSTER * len(self.cluster_names)

    @property
    def state_path(self) -> Path:
        return self.root / "state" / f"{self.name}.json"

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "fleetplan", *with_only(args)]

    def run(self, *args: str, check: int | None = 0, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), cwd=self.root, env=cli_env(env), capture_output=True,
                              text=True, timeout=timeout)
        if check is not None:
            assert done.returncode == check, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text()) if self.state_path.exists() else {"resources": [],
                                                                                         "journal": []}

    def clients(self) -> dict[str, Any]:
        from fleetplan.live.clusters import KubeCluster
        from fleetplan.live.kubeconfigs import ClusterAccess

        return {c.name: KubeCluster(ClusterAccess(c.name, c.kubeconfig, c.context))
                for c in self.lab.clusters[:3]}

    def owned_live(self) -> dict[str, str]:
        """address -> uid of every object on the clusters that carries this fleet's ownership label."""
        from fleetplan.addrs import Address
        from fleetplan.live.reading import selector

        found: dict[str, str] = {}
        for name, cluster in self.clients().items():
            for api_version, kind in OWNED_KINDS:
                group = api_version.rpartition("/")[0]
                for obj in cluster.list(api_version, kind, "", selector(self.name)):
                    meta = obj["metadata"]
                    address = str(Address(name, group, kind, meta.get("namespace") or "", meta["name"]))
                    assert address not in found, f"duplicate object {address}"
                    found[address] = meta["uid"]
        return found


def assert_clean_end_state(fleet: ResourcesFleet, *, destroyed: bool = False) -> None:
    """What a clean apply (or destroy) leaves: exactly the expected owned objects, the state
    recording exactly those with the live uids, no journal, no lock, and a plan with no changes."""
    live = fleet.owned_live()
    state = fleet.state()
    recorded = {r["address"]: r.get("uid") for r in state["resources"]}
    assert state.get("journal", []) == [], f"journal left: {state['journal']}"
    lock = fleet.state_path.with_name(fleet.state_path.name + ".lock")
    assert not lock.exists(), f"lock left behind: {lock.read_text()}"
    if destroyed:
        assert live == {}, f"orphans after destroy: {sorted(live)}"
        assert recorded == {}, f"state still records: {sorted(recorded)}"
        return
    assert len(live) == fleet.expected_count, f"{len(live)} owned objects, expected {fleet.expected_count}"
    assert set(recorded) == set(live), (f"state and clusters disagree: only in state {set(recorded) - set(live)}; "
                                        f"only live {set(live) - set(recorded)}")
    wrong_uid = {a for a, uid in recorded.items() if uid and uid != live[a]}
    assert not wrong_uid, f"state records stale uids for {wrong_uid}"
    plan = fleet.run("plan", "--detailed-exitcode", check=None)
    assert plan.returncode == 0, f"plan after resume is not empty:\n{plan.stdout}\n{plan.stderr}"


def run_in_process(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run the CLI's entry point in this process (no interpreter start-up): (exit, stdout, stderr).

    Used where many runs need no isolation; crash and lock tests always use real subprocesses.
    """
    import contextlib
    import io

    from fleetplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


STACK_KINDS = [*OWNED_KINDS, ("v1", "Service"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
               ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
               ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
               ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
               ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
               ("multicluster.crd.antrea.io/v1alpha2", "ClusterSet"),
               ("cluster.open-cluster-management.io/v1", "ManagedCluster"),
               ("cluster.open-cluster-management.io/v1beta2", "ManagedClusterSet"),
               ("operator.open-cluster-management.io/v1", "ClusterManager"),
               ("operator.open-cluster-management.io/v1", "Klusterlet")]


def assert_stack_end_state(state_path: Path, fleet_name: str, clusters: list[Any], plan: Any,
                           *, destroyed: bool = False) -> int:
    """The end state of a stack fleet after a resumed run: no journal, no lock, a plan with no
    changes, every recorded object live with its recorded uid, and every object on the clusters
    that carries the fleet's label recorded (no orphans); after destroy, nothing at all.
    `plan(*args)` runs `fleetplan plan ARGS` for that fleet. Returns the number of owned objects."""
    from fleetplan.addrs import Address
    from fleetplan.live.clusters import KubeCluster
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.reading import selector

    state = json.loads(state_path.read_text())
    assert state.get("journal", []) == [], f"journal left: {state['journal']}"
    lock = state_path.with_name(state_path.name + ".lock")
    assert not lock.exists(), f"lock left behind: {lock.read_text()}"
    apis = {c.name: KubeCluster(ClusterAccess(c.name, c.kubeconfig, c.context)) for c in clusters}
    live: dict[str, str] = {}
    for name, api in apis.items():
        for api_version, kind in STACK_KINDS:
            group = api_version.rpartition("/")[0]
            for obj in api.list(api_version, kind, "", selector(fleet_name)):
                meta = obj["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                live[str(Address(name, group, kind, meta.get("namespace") or "", meta["name"]))] = meta["uid"]
    recorded = {r["address"]: r for r in state["resources"]}
    if destroyed:
        assert live == {}, f"orphans after destroy: {sorted(live)}"
        assert recorded == {}, f"state still records: {sorted(recorded)}"
        done = plan("--destroy", "--detailed-exitcode")
        assert done.returncode == 0, done.stdout + done.stderr
        return 0
    orphans = set(live) - set(recorded)
    assert not orphans, f"owned objects the state does not record: {sorted(orphans)}"
    for address, record_ in recorded.items():
        parsed = Address.parse(address)
        if parsed.group.endswith("fleetplan.dev") or not record_.get("uid"):
            continue  # operations (tokens, acceptance) are not objects
        obj = apis[parsed.cluster].get(record_["api_version"], parsed.kind, parsed.namespace, parsed.name)
        assert obj is not None, f"state records {address}, which is not on the cluster"
        assert obj["metadata"]["uid"] == record_["uid"], f"state records a stale uid for {address}"
    done = plan("--detailed-exitcode")
    assert done.returncode == 0, f"plan after resume is not empty:\n{done.stdout}\n{done.stderr}"
    return len(live)
