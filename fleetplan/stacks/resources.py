"""The generic `resources` stack: plain manifests from `spec.resources[].path` on selected clusters.

Each entry selects clusters (`all`, `leader`, `members`, or names) and a manifest file or a
directory of `*.yaml`/`*.yml`/`*.json` files (sorted by name, not recursive). Every object becomes
one `DesiredResource` per selected cluster, applied with server-side apply.

Invariants: pure apart from reading the named files; namespaced objects without a namespace land
in `default` (as kubectl would), written into the body so plan and cluster agree; CRDs wait for
Established and Deployments for availability; a Secret's `data`/`stringData` are sensitive; the same
object declared twice for one cluster is an error naming both files.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetplan.addrs import Address
from fleetplan.config.models import Fleet, ResourceSet
from fleetplan.errors import ConfigError, Diagnostic
from fleetplan.stacks.bundles import address_of, is_namespaced, parse_manifests
from fleetplan.stacks.desired import DesiredFleet, DesiredResource, Readiness, ReadinessKind

_SUFFIXES = (".yaml", ".yml", ".json")


def desired_fleet(fleet: Fleet) -> DesiredFleet:
    return DesiredFleet(fleet.name, tuple(desired_resources(fleet)))


def desired_resources(fleet: Fleet) -> list[DesiredResource]:
    resources: list[DesiredResource] = []
    origin: dict[Address, str] = {}
    problems: list[Diagnostic] = []
    protected = _protected(fleet)
    for index, entry in enumerate(fleet.spec.resources):
        clusters = selected_clusters(fleet, entry)
        for file in manifest_files(Path(entry.path)):
            for obj in parse_manifests(file.read_bytes(), str(file)):
                for cluster in clusters:
                    body = _placed(obj)
                    address = address_of(cluster, body)
                    where = f"{file} (spec.resources[{index}])"
                    if address in origin:
                        problems.append(
                            Diagnostic(
                                f"{address} is declared twice: in {origin[address]} and {where}",
                                address=str(address),
                                hint="keep one of them",
                            )
                        )
                        continue
                    origin[address] = where
                    resources.append(
                        DesiredResource(
                            address,
                            body,
                            readiness=_readiness(body, cluster),
                            sensitive_paths=frozenset({"data", "stringData"})
                            if body["kind"] == "Secret"
                            else frozenset(),
                            prevent_destroy=cluster in protected,
                        )
                    )
    if problems:
        raise ConfigError(problems)
    return resources


def selected_clusters(fleet: Fleet, entry: ResourceSet) -> tuple[str, ...]:
    selector = entry.clusters
    leader = (fleet.spec.leader.name,) if fleet.spec.leader.name and not fleet.is_member_only else ()
    members = tuple(m.name for m in fleet.spec.members)
    if selector == "all":
        return leader + members
    if selector == "leader":
        return leader
    if selector == "members":
        return members
    return tuple(selector)


def manifest_files(path: Path) -> Sequence[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _SUFFIXES)
    if path.is_file():
        return (path,)
    raise ConfigError(f"resources path {path} does not exist", hint="fix spec.resources[].path")


def _placed(obj: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    if is_namespaced(body) and not body["metadata"].get("namespace"):
        body["metadata"]["namespace"] = "default"
    return body


def _readiness(body: dict[str, Any], cluster: str) -> Readiness:
    kind, name = body["kind"], body["metadata"]["name"]
    if kind == "CustomResourceDefinition":
        return Readiness(ReadinessKind.ESTABLISHED, description=f"CRD {name} Established on {cluster}")
    if kind == "Deployment":
        return Readiness(ReadinessKind.AVAILABLE, description=f"Deployment {name} available on {cluster}")
    return Readiness()


def _protected(fleet: Fleet) -> frozenset[str]:
    names: set[str] = set()
    for word in fleet.spec.lifecycle.prevent_destroy:
        if word == "leader" and fleet.spec.leader.name:
            names.add(fleet.spec.leader.name)
        elif word == "members":
            names.update(m.name for m in fleet.spec.members)
        else:
            names.add(word)
    return frozenset(names)
