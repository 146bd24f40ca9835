"""Helpers for the controller tests: the Fleet CRD on the management cluster, kubeconfig Secrets,
Fleet resources, and `fleetplan controller` processes whose JSON-lines logs the tests read.

The management cluster is the lab's first cluster; it is also the fleet's leader. Fleets use the
generic `resources` stack only (`--only resources`), so these tests do not depend on the Antrea
or OCM stacks. Their manifests (`APP`, `DEPLOYMENT`: templates to fill with `.format(ns=...,
color=...)`) and the CLI's environment come from the shared kit, `kit.fleets`.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kit.fleets import PARTS, ROOT, cli, cli_env, template

from fleetplan.live.clusters import KubeCluster
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.live.objects import ObjectClient
from fleetplan.live.reading import selector

FLEET_API = "fleetplan.dev/v1alpha1"

APP = template("namespace", "configmap-color")
DEPLOYMENT = PARTS["deployment"]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def objects(cluster: Any) -> ObjectClient:
    return ObjectClient(KubeCluster(ClusterAccess(cluster.name, str(cluster.kubeconfig), cluster.context)))


def install_crd(api: ObjectClient) -> None:
    body = yaml.safe_load((ROOT / "schemas" / "fleet.crd.yaml").read_text())
    api.cluster.apply(body)

    def established() -> bool:
        crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", body["metadata"]["name"])
        conditions = (crd or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for("the Fleet CRD to be Established", established, 60)
    wait_for("Fleet to be served", lambda: api.cluster.resource_info(FLEET_API, "Fleet"), 30)


def kubeconfig_secret(api: ObjectClient, namespace: str, cluster: Any) -> str:
    name = f"{cluster.name}-kubeconfig"
    data = base64.b64encode(Path(cluster.kubeconfig).read_bytes()).decode()
    api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                "type": "Opaque", "data": {"kubeconfig": data}})
    return name


def management_with_kubeconfigs(lab: Any, lab_namespace: Callable[[str], str]) -> tuple[Any, ObjectClient, str]:
    """The lab's first cluster as the management cluster: the Fleet CRD installed, a fresh namespace,
    and a kubeconfig Secret there for each of the first three clusters. Returns (cluster, client, namespace)."""
    management = lab.clusters[0]
    api = objects(management)
    install_crd(api)
    namespace = lab_namespace(management.name)
    for cluster in lab.clusters[:3]:
        kubeconfig_secret(api, namespace, cluster)
    return management, api, namespace


def owned_names(cluster: Any, fleet: str) -> set[str]:
    """Names of the ConfigMaps and Namespaces on `cluster` that carry `fleet`'s ownership labels."""
    listed = objects(cluster).cluster
    return {o["metadata"]["name"] for kind in ("ConfigMap", "Namespace")
            for o in listed.list("v1", kind, "", selector(fleet))}


class Controller:
    """A `fleetplan controller` subprocess with its log file."""

    def __init__(self, workdir: Path, management: Any, namespace: str, *, lease: str = "ctl",
                 lease_duration: str = "6s", resync: str = "5s", tag: str = "", watch: str | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.tag = tag or uuid.uuid4().hex[:4]
        self.log_path = workdir / f"controller-{self.tag}.log"
        args = cli("controller", "--kubeconfig", str(management.kubeconfig),
                   "--context", management.context, "--namespace", namespace, "--watch-namespace", watch or namespace,
                   "--resync", resync, "--lease-name", lease, "--lease-duration", lease_duration,
                   "--manifests-dir", str(workdir), "--only", "resources")
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=cli_env(extra_env), cwd=workdir)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": "raw", "text": line})
        return out

    def seen(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events() if e.get("event") == event), None)

    def completed(self) -> list[tuple[str, str]]:
        return [(e["address"], e["action"]) for e in self.events() if e.get("event") == "step_complete"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def text(self) -> str:
        return self.log_path.read_text()


def fleet_body(name: str, namespace: str, leader: Any, members: list[Any], *,
               prevent: tuple[str, ...] = (), lease_duration: str = "6s") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "stack": "antrea",
        "version": "v2.2.0",
        "clusterSet": {"name": f"{name}-set"},
        "leader": {"name": leader.name, "kubeconfigSecret": {"name": f"{leader.name}-kubeconfig"}},
        "members": [{"name": m.name, "kubeconfigSecret": {"name": f"{m.name}-kubeconfig"}} for m in members],
        "wait": {"timeout": "90s"},
        "resources": [{"clusters": "all", "path": "extras/"}],
        "state": {"leaseDuration": lease_duration},
    }
    if prevent:
        spec["lifecycle"] = {"preventDestroy": list(prevent)}
    return {"apiVersion": FLEET_API, "kind": "Fleet", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def ready_at(api: ObjectClient, namespace: str, name: str, generation: int | None = None) -> Any:
    """The Fleet once Ready is True for `generation` (or the current one)."""

    def check() -> dict[str, Any] | None:
        obj = api.get(FLEET_API, "Fleet", namespace, name)
        if obj is None:
            return None
        want = generation or obj["metadata"].get("generation")
        cond = condition(obj, "Ready")
        ok = cond and cond["status"] == "True" and obj.get("status", {}).get("observedGeneration") == want
        return obj if ok else None

    return check
