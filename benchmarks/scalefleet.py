"""Scale fleets for the benchmark: 1 leader + N members simulated on the lab's clusters.

A member is a name in fleet.yaml with its own kubeconfig file (a copy of its lab cluster's, pointed
at that cluster's latency proxy) and its own namespace, so fleetplan opens one connection per
member and makes the requests a separate cluster would cost. Members are spread round-robin over
the lab clusters; the leader lives on the first one.

The workload mirrors the namespaced half of a multi-cluster join (the part that can be repeated
per member on a shared API server; CRDs and kube-system controllers cannot):

    leader:  Namespace <fleet>-leader, Role member, and per member ServiceAccount member-<m> and
             RoleBinding member-<m>                                   (2 + 2N objects)
    member:  Namespace <fleet>-<m>, ServiceAccount agent, Role agent, RoleBinding agent,
             ConfigMap agent-config, Secret leader-token (Opaque)     (6 objects, 6 kinds)

The same manifests, under another name, are what the kubectl baseline applies (`baseline.py`).
Manifests are JSON `List` files (fleetplan reads `.json` with the JSON parser; YAML parsing would
cost ~9 ms of CPU per member file, which a real fleet pays once for a shared file, not per member).
Every object carries the label `bench.fleetplan.dev/run=<run>`, so `remove` deletes a run's
namespaces (and with them everything namespaced) in one request per lab cluster.

Kubeconfig copies hold client keys: they are written 0600 inside the run's temporary directory,
which the caller deletes.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetplan.lab.proxy import write_proxied_kubeconfig

RUN_LABEL = "bench.fleetplan.dev/run"
LEADER = "leader"
OBJECTS_PER_MEMBER = 6
KINDS_PER_MEMBER = 6


@dataclass(frozen=True)
class Endpoint:
    """Where one lab cluster is reached: its admin kubeconfig and context, and the proxy's URL."""

    cluster: str  # the lab cluster's name
    kubeconfig: str
    context: str
    server: str  # the URL members use (the latency proxy in front of the API server)


@dataclass(frozen=True)
class ScaleFleet:
    root: Path
    name: str  # fleet name; also the run label's value and the namespace prefix
    members: tuple[str, ...]
    placement: dict[str, str]  # fleet cluster name -> lab cluster name

    @property
    def fleet_file(self) -> Path:
        return self.root / "fleet.yaml"

    def kubeconfig(self, cluster: str) -> Path:
        return self.root / "kubeconfigs" / cluster


def member_names(count: int) -> tuple[str, ...]:
    width = max(3, len(str(count)))
    return tuple(f"m{i:0{width}d}" for i in range(1, count + 1))


def write_fleet(root: Path, name: str, count: int, endpoints: Sequence[Endpoint], *,
                in_memory: bool = False) -> ScaleFleet:
    """Write fleet.yaml, kubeconfig copies and manifests for `name` with `count` members.

    `in_memory` (for planning without clusters): no kubeconfigs, and the members share one
    manifest file (`clusters: members`), as a real fleet of separate clusters would.
    """
    members = member_names(count)
    placement = {LEADER: endpoints[0].cluster}
    placement.update({m: endpoints[i % len(endpoints)].cluster for i, m in enumerate(members)})
    by_cluster = {e.cluster: e for e in endpoints}
    (root / "kubeconfigs").mkdir(parents=True, exist_ok=True)
    for cluster, lab_cluster in placement.items() if not in_memory else ():
        _copy_kubeconfig(by_cluster[lab_cluster], root / "kubeconfigs" / cluster)
    entries = [f"    - {{clusters: leader, path: ./manifests/{LEADER}.json}}"]
    if in_memory:
        write_manifests(root / "manifests", name, members, shared=True)
        entries.append("    - {clusters: members, path: ./manifests/members.json}")
    else:
        write_manifests(root / "manifests", name, members)
        entries += [f"    - {{clusters: [{m}], path: ./manifests/{m}.json}}" for m in members]
    member_lines = [f"    - {{name: {m}, kubeconfig: ./kubeconfigs/{m}}}" for m in members]
    (root / "fleet.yaml").write_text(
        "apiVersion: fleetplan.dev/v1alpha1\n"
        "kind: Fleet\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        "  stack: antrea\n"
        "  version: v2.7.0\n"
        f"  clusterSet: {{name: {name}-set}}\n"
        f"  leader: {{name: {LEADER}, kubeconfig: ./kubeconfigs/{LEADER}}}\n"
        "  members:\n" + "\n".join(member_lines) + "\n"
        "  wait: {timeout: 120s}\n"
        "  resources:\n" + "\n".join(entries) + "\n"
    )
    return ScaleFleet(root, name, members, placement)


def write_manifests(directory: Path, name: str, members: Sequence[str], *, shared: bool = False) -> None:
    """One JSON `List` per cluster, the Namespace first (kubectl applies in list order); with
    `shared`, one file for every member instead."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{LEADER}.json").write_text(_as_list(leader_objects(name, members)))
    if shared:
        (directory / "members.json").write_text(_as_list(member_objects(name, "member")))
        return
    for member in members:
        (directory / f"{member}.json").write_text(_as_list(member_objects(name, member)))


def leader_objects(name: str, members: Sequence[str]) -> list[dict[str, Any]]:
    ns = f"{name}-leader"
    objects = [_namespace(ns, name),
               _obj("rbac.authorization.k8s.io/v1", "Role", "member", ns, name,
                    rules=[{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list"]}])]
    for member in members:
        objects.append(_obj("v1", "ServiceAccount", f"member-{member}", ns, name))
        objects.append(_binding(f"member-{member}", ns, name, "member", f"member-{member}"))
    return objects


def member_objects(name: str, member: str) -> list[dict[str, Any]]:
    ns = f"{name}-{member}"
    token = base64.b64encode(secrets.token_bytes(24)).decode()  # a stand-in value, not a credential
    return [
        _namespace(ns, name),
        _obj("v1", "ServiceAccount", "agent", ns, name),
        _obj("rbac.authorization.k8s.io/v1", "Role", "agent", ns, name,
             rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
        _binding("agent", ns, name, "agent", "agent"),
        _obj("v1", "ConfigMap", "agent-config", ns, name,
             data={"clusterID": member, "leaderNamespace": f"{name}-leader"}),
        _obj("v1", "Secret", "leader-token", ns, name, type="Opaque", data={"token": token}),
    ]


def remove(name: str, endpoints: Sequence[Endpoint], kubectl: str) -> None:
    """Delete every namespace labelled with run `name` (without waiting for them to finish)."""
    for endpoint in endpoints:
        subprocess.run([kubectl, "--kubeconfig", endpoint.kubeconfig, "--context", endpoint.context,
                        "delete", "namespaces", "-l", f"{RUN_LABEL}={name}", "--wait=false"],
                       capture_output=True, check=False, timeout=120)


def endpoints_for(clusters: Sequence[Any], server_for: Callable[[Any], str]) -> list[Endpoint]:
    """`Endpoint`s for lab clusters; `server_for(cluster)` is the URL members use to reach it."""
    return [Endpoint(c.name, c.kubeconfig, c.context, server_for(c)) for c in clusters]


def _copy_kubeconfig(endpoint: Endpoint, target: Path) -> None:
    write_proxied_kubeconfig(endpoint.kubeconfig, endpoint.context, endpoint.server, target)


def _namespace(ns: str, run: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {RUN_LABEL: run}}}


def _obj(api_version: str, kind: str, name: str, ns: str, run: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": ns, "labels": {RUN_LABEL: run}}, **fields}


def _binding(name: str, ns: str, run: str, role: str, account: str) -> dict[str, Any]:
    return _obj("rbac.authorization.k8s.io/v1", "RoleBinding", name, ns, run,
                roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                subjects=[{"kind": "ServiceAccount", "name": account, "namespace": ns}])


def _as_list(objects: Sequence[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=1) + "\n"
