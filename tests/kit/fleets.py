"""Fleets for tests, driven through the real CLI: the one place that knows how to spawn `fleetplan`
and how to lay out a `stack: none` fleet of the generic `resources` stack over lab clusters.

- `cli_env(extra)`: the environment of a spawned CLI: this checkout first on PYTHONPATH, no proxy
  variables, `$FLEETPLAN_MIRROR` set, and none of the variables that change the CLI's behaviour
  behind a test's back (debug tracebacks, kill points, an ambient KUBECONFIG).
- `run_cli(*args, cwd=...)`: run it and, unless `check=None`, assert its exit code.
- `manifests(ns, color, *parts)`: YAML for any of a Namespace, ConfigMap (`data.color`), ServiceAccount,
  Deployment, Role and RoleBinding, all in namespace `ns`; `template(*parts)` is the same text
  before `ns` and `color` are filled in, for suites that hand a template around.
- `fleet_yaml(...)` / `ResourcesFleet`: a fleet file whose leader is the first given cluster and
  members the rest, with `spec.resources` pointing at `./extras/`, where `write_manifests` puts the
  application (APP_PARTS) and optionally its RBAC (RBAC_PARTS): 6 objects per cluster, all in the
  fleet's own namespace `<name>-ns`. A fleet file may instead name the Antrea stack, for suites
  that narrow their engine commands to `--only resources` (`ResourcesFleet.arguments`).

Invariants: every fleet gets a fresh unique name, so its ownership label, namespace and state file
are its own and tests never see each other's objects; nothing is written outside `root`.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from kit.netguard import strip_proxies

ROOT = Path(__file__).resolve().parents[2]
MIRROR = Path(os.environ.get("FLEETPLAN_MIRROR") or ROOT.parent / "shared" / "upstream").resolve()
# Variables a test must set itself when it wants them: inherited, they would change what the CLI does.
CLI_DROPPED = ("FLEETPLAN_DEBUG", "FLEETPLAN_TEST_KILL_AT", "FLEETPLAN_TEST_HOOKS", "KUBECONFIG")
# Every kind the manifests below create, plus Secret (token Secrets a stack may add).
OWNED_KINDS = (("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("v1", "Secret"),
               ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
               ("apps/v1", "Deployment"))

# A one-replica Deployment named NAME (its app label and image too); POD stands for extra lines of
# its pod spec. Written once so that the Deployments below differ only where they mean to.
_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: NAME, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: NAME}}}}
  template:
    metadata: {{labels: {{app: NAME}}}}
    spec:
POD      containers: [{{name: NAME, image: "registry.example/NAME:1.0"}}]
"""
# A pod spec no node can satisfy: the Deployment never becomes available, so an apply waits on it.
_NO_NODE = '      nodeSelector: {{fleetplan.dev/no-such-node: "true"}}\n'

# One YAML document per part; `manifests(ns, color, *parts)` joins the ones a test wants.
PARTS = {
    "namespace": """\
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
""",
    "configmap": """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{color: {color}, size: "3"}}
""",
    # The controller suites' smaller ConfigMap: the same name, `data.color` only.
    "configmap-color": """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{color: {color}}}
""",
    "serviceaccount": """\
apiVersion: v1
kind: ServiceAccount
metadata: {{name: robot, namespace: {ns}}}
""",
    "deployment": _DEPLOYMENT.replace("NAME", "web").replace("POD", ""),
    # `stuck`: selects no node, so it never becomes available (keeps an apply waiting).
    "deployment-unschedulable": _DEPLOYMENT.replace("NAME", "stuck").replace("POD", _NO_NODE),
    "role": """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get, list]}}]
""",
    "rolebinding": """\
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: robot-reads, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{kind: ServiceAccount, name: robot, namespace: {ns}}}]
""",
}
APP_PARTS = ("namespace", "configmap", "serviceaccount", "deployment")
RBAC_PARTS = ("role", "rolebinding")


def template(*parts: str) -> str:
    """The named PARTS (all of APP_PARTS when none are named) as one multi-document YAML template,
    to be filled with `.format(ns=..., color=...)`."""
    return "---\n".join(PARTS[p] for p in (parts or APP_PARTS))


def manifests(ns: str, color: str = "blue", *parts: str) -> str:
    """The named PARTS (all of APP_PARTS when none are named) as one multi-document YAML text."""
    return template(*parts).format(ns=ns, color=color)


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    strip_proxies(env)
    for name in CLI_DROPPED:
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("FLEETPLAN_MIRROR", str(MIRROR))
    env.update(extra or {})
    if "FLEETPLAN_TEST_KILL_AT" in env:  # the kill switch acts only with test hooks switched on
        env["FLEETPLAN_TEST_HOOKS"] = "1"
    return env


def cli(*args: str) -> list[str]:
    """The argv of this checkout's CLI (the interpreter running the tests, not an installed script)."""
    return [sys.executable, "-m", "fleetplan", *args]


def run_cli(*args: str, cwd: Path | str, check: int | None = 0, env: Mapping[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `fleetplan ARGS` in `cwd` with `cli_env(env)`; assert the exit code unless `check` is None."""
    done = subprocess.run(cli(*args), cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert done.returncode == check, (f"fleetplan {' '.join(args)}: exit {done.returncode}, expected {check}\n"
                                          f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    return done


def _ref(cluster: Any, kubeconfigs: Mapping[str, str]) -> str:
    return (f"{{name: {cluster.name}, kubeconfig: {kubeconfigs.get(cluster.name, cluster.kubeconfig)}, "
            f"context: {cluster.context}}}")


def fleet_yaml(name: str, clusters: Sequence[Any], *, kubeconfigs: Mapping[str, str] | None = None,
               wait_timeout: str = "60s", resources_path: str = "./extras/",
               stack: Literal["none", "antrea"] = "none", state: str | None = None) -> str:
    """A fleet of `stack` (`none` by default): `clusters[0]` leads, the rest are members;
    `kubeconfigs` overrides the kubeconfig path of any cluster by name (a broken or hostile one, say).

    `stack="antrea"` names Antrea v2.2.0 with the cluster set `<name>-set`, for suites that run the
    engine with `--only resources`; `state` is a YAML flow mapping for `spec.state` (a backend)."""
    leader, members = clusters[0], clusters[1:]
    overrides = dict(kubeconfigs or {})
    member_lines = "".join(f"\n    - {_ref(m, overrides)}" for m in members)
    main = f"\n  version: v2.2.0\n  clusterSet: {{name: {name}-set}}" if stack == "antrea" else ""
    state_line = f"  state: {state}\n" if state else ""
    return f"""\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata: {{name: {name}}}
spec:
  stack: {stack}{main}
  leader: {_ref(leader, overrides)}
  members:{member_lines if members else " []"}
  wait: {{timeout: {wait_timeout}}}
  resources:
    - {{clusters: all, path: {resources_path}}}
{state_line}"""


class ResourcesFleet:
    """A `stack: none` fleet over the lab's first 3 clusters in `root`, run through the CLI.

    `lab_clusters` are the LabClusters (c1 leads), `clusters` maps their names to fleetplan.live
    KubeClusters for checks, `owned_live()` maps the `Address` of every object carrying the fleet's
    ownership label to its uid, `state()` is the local state file's content. A subclass may name
    another main stack (`stack`) and narrow every command it runs by overriding `arguments`."""

    OBJECTS_PER_CLUSTER = 6  # with RBAC; 4 without

    stack: Literal["none", "antrea"] = "none"

    def __init__(self, root: Path, lab: Any, *, prefix: str = "f", kubeconfigs: Mapping[str, str] | None = None,
                 wait_timeout: str = "60s", color: str = "blue", rbac: bool = True) -> None:
        self.root = root
        self.lab = lab
        self.lab_clusters = list(lab.clusters[:3])
        self.name = prefix + uuid.uuid4().hex[:8]
        self.ns = self.name + "-ns"
        self.kubeconfigs = dict(kubeconfigs or {})
        self.wait_timeout = wait_timeout
        self.rbac = rbac
        (root / "extras").mkdir(parents=True, exist_ok=True)
        self.write_fleet()
        self.write_manifests(color=color, rbac=rbac)

    @property
    def fleet_file(self) -> Path:
        return self.root / "fleet.yaml"

    def write_fleet(self) -> None:
        self.fleet_file.write_text(fleet_yaml(self.name, self.lab_clusters, kubeconfigs=self.kubeconfigs,
                                              wait_timeout=self.wait_timeout, stack=self.stack))

    def write_manifests(self, *, color: str, rbac: bool = True) -> None:
        (self.root / "extras" / "app.yaml").write_text(manifests(self.ns, color, *APP_PARTS))
        rbac_file = self.root / "extras" / "rbac.yaml"
        if rbac:
            rbac_file.write_text(manifests(self.ns, color, *RBAC_PARTS))
        else:
            rbac_file.unlink(missing_ok=True)
        self.rbac = rbac

    @property
    def expected_count(self) -> int:
        return (self.OBJECTS_PER_CLUSTER if self.rbac else 4) * len(self.lab_clusters)

    @property
    def state_path(self) -> Path:
        return self.root / "state" / f"{self.name}.json"

    def arguments(self, args: Sequence[str]) -> list[str]:
        """The CLI arguments `command` and `run` use for `args` (unchanged here)."""
        return list(args)

    def command(self, *args: str) -> list[str]:
        return cli(*self.arguments(args))

    def run(self, *args: str, check: int | None = 0, env: Mapping[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run_cli(*self.arguments(args), cwd=self.root, check=check, env=env, timeout=timeout)

    def plan_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.run("plan", "--json").stdout)
        return doc

    def destroy(self) -> subprocess.CompletedProcess[str]:
        """Best effort (for fixture teardown): never raises on a non-zero exit."""
        return self.run("destroy", "--auto-approve", check=None)

    def state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"resources": [], "journal": []}
        doc: dict[str, Any] = json.loads(self.state_path.read_text())
        return doc

    @functools.cached_property
    def clusters(self) -> dict[str, Any]:
        """name -> fleetplan.live KubeCluster with the lab's admin kubeconfig (not the overrides)."""
        from fleetplan.live.clusters import KubeCluster
        from fleetplan.live.kubeconfigs import ClusterAccess

        return {c.name: KubeCluster(ClusterAccess(c.name, c.kubeconfig, c.context)) for c in self.lab_clusters}

    def clients(self) -> dict[str, Any]:
        return self.clusters

    def owned_live(self) -> dict[str, str]:
        """Address -> uid of every object on the clusters carrying this fleet's ownership label."""
        from fleetplan.addrs import Address
        from fleetplan.live.reading import selector

        found: dict[str, str] = {}
        for name, cluster in self.clusters.items():
            for api_version, kind in OWNED_KINDS:
                group = api_version.rpartition("/")[0]
                for obj in cluster.list(api_version, kind, "", selector(self.name)):
                    meta = obj["metadata"]
                    address = str(Address(name, group, kind, meta.get("namespace") or "", meta["name"]))
                    assert address not in found, f"duplicate object {address}"
                    found[address] = meta["uid"]
        return found
