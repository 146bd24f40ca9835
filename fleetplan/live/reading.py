"""Batched, parallel reads of what fleetplan cares about into a `Snapshot`, and ownership labels.

Invariants:
- One LIST per (cluster, apiVersion, kind, namespace), filtered by the ownership label selector.
  Wanted addresses the LIST did not return are looked up to tell "absent" from "exists but not
  ours": one GET for a single one, one unfiltered metadata-only LIST for several (a first apply of
  a leader with 200 members' accounts costs one request, not 200). A converged fleet is therefore
  read with LISTs alone, and a new one with at most two requests per (kind, namespace). Nothing
  is read in a wanted Namespace that was found absent (read first): a new member costs two
  requests, not two per kind.
- An object found only by the metadata-only LIST that does carry the ownership labels (created
  between the two LISTs) is read whole with a GET, so owned objects are always whole.
- Clusters are read in parallel, one worker each; within a cluster, requests are sequential so the
  per-cluster request counter is exact.
- Objects fleetplan owns carry `fleetplan.dev/fleet=<fleet>` and `app.kubernetes.io/managed-by=
  fleetplan`; an object without them is never changed or deleted (it is reported as unowned).
- Addresses of group `fleetplan.dev` are operations, not objects: they are never read.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fleetplan.addrs import Address
from fleetplan.errors import ClusterError, Diagnostic
from fleetplan.live.clusters import Cluster, Obj

FLEET_LABEL = "fleetplan.dev/fleet"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "fleetplan"
LINEAGE_ANNOTATION = "fleetplan.dev/lineage"  # the lineage of the state that created the object
OPERATION_GROUP = "fleetplan.dev"
_READERS = 64  # clusters read at once; reads wait on the network, so more than the CPUs


@dataclass(frozen=True)
class Snapshot:
    """What was read: owned objects, same-name objects fleetplan does not own, request counts, and
    the clusters that could not be read (nothing of theirs is in `owned` or `unowned`)."""

    owned: Mapping[Address, Obj] = field(default_factory=dict)
    unowned: Mapping[Address, Obj] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)  # cluster -> requests made by this read
    unreachable: Mapping[str, Diagnostic] = field(default_factory=dict)  # cluster -> why not read

    def fingerprint(self, addresses: Iterable[Address]) -> str:
        """A digest of the identity and version of every address read (absent ones included)."""
        digest = hashlib.sha256()
        for address in sorted(set(addresses), key=str):
            obj = self.owned.get(address) or self.unowned.get(address)
            state = "absent" if obj is None else _version_of(obj, owned=address in self.owned)
            digest.update(f"{address}={state}\n".encode())
        return "sha256:" + digest.hexdigest()


def owned_body(body: Mapping[str, Any], fleet: str, lineage: str | None = None) -> Obj:
    """A deep copy of `body` with the ownership labels set, and the lineage annotation when the
    state's lineage is known (labels say which fleet; the lineage says which state of it)."""
    out = copy.deepcopy(dict(body))
    labels = out.setdefault("metadata", {}).setdefault("labels", {})
    labels[FLEET_LABEL] = fleet
    labels[MANAGED_BY_LABEL] = MANAGED_BY
    if lineage is not None:
        out["metadata"].setdefault("annotations", {})[LINEAGE_ANNOTATION] = lineage
    return out


def lineage_of(obj: Mapping[str, Any]) -> str | None:
    annotations = obj.get("metadata", {}).get("annotations") or {}
    found = annotations.get(LINEAGE_ANNOTATION)
    return str(found) if found is not None else None


def is_owned(obj: Mapping[str, Any], fleet: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return bool(labels.get(FLEET_LABEL) == fleet and labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def selector(fleet: str) -> str:
    return f"{FLEET_LABEL}={fleet},{MANAGED_BY_LABEL}={MANAGED_BY}"


def read_snapshot(
    clusters: Mapping[str, Cluster], fleet: str, wanted: Mapping[Address, str]
) -> tuple[Snapshot, tuple[Diagnostic, ...]]:
    """Read every wanted address (address -> apiVersion); unreachable clusters become diagnostics."""
    per_cluster: dict[str, dict[Address, str]] = defaultdict(dict)
    problems: list[Diagnostic] = []
    unreachable: dict[str, Diagnostic] = {}
    for address, api_version in wanted.items():
        if address.group == OPERATION_GROUP or not api_version:
            continue
        if address.cluster not in clusters:
            problems.append(Diagnostic(f"no connection for cluster {address.cluster}", address=str(address)))
            unreachable.setdefault(address.cluster, problems[-1])
            continue
        per_cluster[address.cluster][address] = api_version

    def read_one(name: str) -> tuple[str, dict[Address, Obj], dict[Address, Obj], int]:
        cluster = clusters[name]
        before = cluster.requests
        owned, unowned = _read_cluster(cluster, fleet, per_cluster[name])
        return name, owned, unowned, cluster.requests - before

    owned: dict[Address, Obj] = {}
    unowned: dict[Address, Obj] = {}
    requests: dict[str, int] = {}
    if per_cluster:
        with ThreadPoolExecutor(max_workers=min(_READERS, len(per_cluster))) as pool:
            futures = {name: pool.submit(read_one, name) for name in sorted(per_cluster)}
            for name, future in futures.items():
                try:
                    _, got_owned, got_unowned, count = future.result()
                except ClusterError as err:
                    problems.extend(err.diagnostics)
                    unreachable[name] = err.diagnostics[0]
                    continue
                owned.update(got_owned)
                unowned.update(got_unowned)
                requests[name] = count
    return Snapshot(owned, unowned, requests, unreachable), tuple(problems)


def _read_cluster(
    cluster: Cluster, fleet: str, wanted: Mapping[Address, str]
) -> tuple[dict[Address, Obj], dict[Address, Obj]]:
    batches: dict[tuple[str, str, str], list[Address]] = defaultdict(list)
    for address, api_version in wanted.items():
        batches[(api_version, address.kind, address.namespace)].append(address)
    owned: dict[Address, Obj] = {}
    unowned: dict[Address, Obj] = {}
    absent_namespaces: set[str] = set()
    # Namespaces first: nothing can exist in a wanted namespace that does not.
    for (api_version, kind, namespace), addresses in sorted(batches.items(), key=_namespaces_first):
        if namespace in absent_namespaces:
            continue
        info = cluster.resource_info(api_version, kind)
        if info is None:  # the type is not served yet (its CRD is still to be created)
            continue
        listed = cluster.list(api_version, kind, namespace if info.namespaced else "", selector(fleet))
        by_name = {
            (o["metadata"].get("namespace", "") if info.namespaced else "", o["metadata"]["name"]): o
            for o in listed
        }
        missing = [a for a in addresses if (a.namespace, a.name) not in by_name]
        if len(missing) > 1:
            others = cluster.list(api_version, kind, namespace if info.namespaced else "", "", metadata_only=True)
            names = {(a.namespace if info.namespaced else "", a.name) for a in missing}
            for other in others:
                meta = other.get("metadata", {})
                key = (meta.get("namespace", "") if info.namespaced else "", meta.get("name"))
                if key not in names:
                    continue
                if not is_owned(other, fleet):
                    by_name[key] = other
                elif (whole := cluster.get(api_version, kind, key[0], key[1])) is not None:
                    by_name[key] = whole  # created between the two LISTs; gone again means absent
        elif missing:
            found = cluster.get(api_version, kind, missing[0].namespace, missing[0].name)
            if found is not None:
                by_name[(missing[0].namespace, missing[0].name)] = found
        for address in addresses:
            obj = by_name.get((address.namespace, address.name))
            if obj is None:
                if (api_version, kind) == ("v1", "Namespace"):
                    absent_namespaces.add(address.name)
                continue
            (owned if is_owned(obj, fleet) else unowned)[address] = obj
    return owned, unowned


def _namespaces_first(batch: tuple[tuple[str, str, str], list[Address]]) -> tuple[bool, tuple[str, str, str]]:
    key = batch[0]
    return (key[:2] != ("v1", "Namespace"), key)


def _version_of(obj: Mapping[str, Any], *, owned: bool) -> str:
    meta = obj.get("metadata", {})
    # generation moves only when the spec does, so status churn (a Deployment rolling out) does not
    # make a plan stale; objects without a generation fall back to resourceVersion.
    version = meta.get("generation") or meta.get("resourceVersion", "")
    labels = json.dumps(meta.get("labels") or {}, sort_keys=True)
    digest = hashlib.sha256(labels.encode()).hexdigest()[:12]
    return f"{'owned' if owned else 'unowned'}:{meta.get('uid', '')}:{version}:{digest}"
