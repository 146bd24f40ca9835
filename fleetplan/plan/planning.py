"""Make a `Plan`: read the clusters, then decide every step (`deciding`, `deleting`).

`plan_fleet` is the orchestration: it connects clusters that left the fleet but still hold
recorded objects (reached the way the state recorded, `State.clusters`, so their objects are
deleted, not orphaned), builds the graph, makes one batched read, runs the stack's read-only
preflight probes, and hands the snapshot and a dry-run function to `deciding.decide`.

The server-side dry-runs `decide` asks for run in parallel, as the reads do (at most
`_DRY_RUNS_PER_CLUSTER` at once on one cluster): `decide` is pure, so it runs once with a dry-run
that only notes what is asked, the dry-runs run together, and `decide` runs again on their results.
A plan that changes every member therefore takes a few round trips, not one per changed object.

A cluster that cannot be connected or read does not stop the plan (DESIGN section 5): it is
recorded in `Snapshot.unreachable`, its steps are unknown (`unknowns`), the reason is an error in
`Plan.errors`, and the other clusters are planned as usual.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from fleetplan.addrs import Address
from fleetplan.errors import ClusterError, Diagnostic, PlanError
from fleetplan.graph.building import ResourceGraph, build_graph
from fleetplan.live import handlers, reading
from fleetplan.live.clusters import Cluster, KubeCluster, Obj
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.plan.deciding import Options, decide
from fleetplan.plan.model import Plan
from fleetplan.stacks.desired import DesiredFleet, Ref
from fleetplan.state.model import State

_DRY_RUNS_PER_CLUSTER = 10
_DRY_RUN_WORKERS = 64


def plan_fleet(
    desired: DesiredFleet,
    clusters: Mapping[str, Cluster],
    state: State | None,
    options: Options | None = None,
    accesses: Mapping[str, ClusterAccess] | None = None,
) -> Plan:
    """Read the clusters and decide every step; a cluster that cannot be read makes its steps
    unknown and is named in `Plan.errors` (every read problem is attributed to its cluster)."""
    options = options or Options()
    if state is None and options.new_lineage is None:  # the first state's lineage, chosen now
        options = replace(options, new_lineage=str(uuid.uuid4()))
    clusters, accesses, retired_problems = _with_retired_clusters(clusters, accesses, state)
    graph = build_graph(desired.resources)
    wanted = read_set(desired, state)
    snapshot, _problems = reading.read_snapshot(clusters, desired.fleet_name, wanted)
    if retired_problems:  # say why there was no connection, not just that there was none
        snapshot = replace(snapshot, unreachable={**snapshot.unreachable, **retired_problems})
    readable = {n: c for n, c in clusters.items() if n not in snapshot.unreachable}

    plan = _decided(desired, graph, state, snapshot, clusters, options)
    return replace(
        plan,
        warnings=(*preflight_warnings(desired, readable), *plan.warnings),
        fingerprint=snapshot.fingerprint(wanted),
        read_set=tuple(sorted(wanted.items(), key=lambda item: str(item[0]))),
        clusters=dict(accesses or {}),
    )


def _decided(
    desired: DesiredFleet,
    graph: ResourceGraph,
    state: State | None,
    snapshot: reading.Snapshot,
    clusters: Mapping[str, Cluster],
    options: Options,
) -> Plan:
    now = time.time()
    asked: dict[Address, Obj] = {}

    def note(address: Address, body: Obj) -> Obj:
        asked[address] = body
        return body

    first = decide(desired, graph, state, snapshot, note, options, now)
    if not asked:
        return first
    results = _dry_runs(clusters, asked)

    def answered(address: Address, body: Obj) -> Obj:
        result = results.get(address) if asked.get(address) == body else None
        if result is None:  # not asked in the first pass (never expected): ask now
            result = clusters[address.cluster].apply(body, dry_run=True)
        if isinstance(result, ClusterError):
            raise result
        return result

    return decide(desired, graph, state, snapshot, answered, options, now)


def _dry_runs(clusters: Mapping[str, Cluster], asked: Mapping[Address, Obj]) -> dict[Address, Obj | ClusterError]:
    """Every dry-run at once, at most `_DRY_RUNS_PER_CLUSTER` per cluster; a ClusterError is the
    answer for its address (raised where `decide` asks, as a sequential dry-run would be)."""
    gates = {name: threading.BoundedSemaphore(_DRY_RUNS_PER_CLUSTER) for name in {a.cluster for a in asked}}

    def one(address: Address, body: Obj) -> Obj | ClusterError:
        with gates[address.cluster]:
            try:
                return clusters[address.cluster].apply(body, dry_run=True)
            except ClusterError as err:
                return err

    with ThreadPoolExecutor(max_workers=min(_DRY_RUN_WORKERS, len(asked))) as pool:
        futures = {address: pool.submit(one, address, body) for address, body in asked.items()}
        return {address: future.result() for address, future in futures.items()}


def preflight_warnings(desired: DesiredFleet, clusters: Mapping[str, Cluster]) -> tuple[Diagnostic, ...]:
    """The stack's own warnings, and what its probes find on the clusters (read only).

    A probe that cannot be read (no connection, no permission) is judged as absent: preflight
    warns about what it sees and never stops a plan."""
    found = [*desired.diagnostics]
    found += [Diagnostic(text, address="spec", severity="warning") for text in desired.warnings]
    for probe in desired.probes:
        cluster = clusters.get(probe.cluster)
        obj = None
        if cluster is not None:
            try:
                obj = cluster.get(probe.api_version, probe.kind, probe.namespace, probe.name)
            except ClusterError:
                obj = None
        judged = probe.judge(obj)
        if judged is not None:
            found.append(judged)
    return tuple(found)


def _with_retired_clusters(
    clusters: Mapping[str, Cluster], accesses: Mapping[str, ClusterAccess] | None, state: State | None
) -> tuple[Mapping[str, Cluster], Mapping[str, ClusterAccess] | None, dict[str, Diagnostic]]:
    """Add connections to clusters the fleet no longer names but the state still holds objects on;
    the third value says why a retired cluster could not be connected (it is then unreachable)."""
    if state is None:
        return clusters, accesses, {}
    held = {a.cluster for a in state.resources} | {e.address.cluster for e in state.journal}
    retired = {
        name: ClusterAccess.from_dict(dict(state.clusters[name]))
        for name in sorted(held)
        if name not in clusters and name in state.clusters
    }
    if not retired:
        return clusters, accesses, {}
    connected: dict[str, Cluster] = {}
    problems: dict[str, Diagnostic] = {}
    for name, access in retired.items():
        try:
            connected[name] = KubeCluster(access)
        except ClusterError as err:
            problems[name] = Diagnostic(
                f"cluster {name} left the fleet but the state still holds objects fleetplan created "
                f"there, and it cannot be reached to delete them: {err.diagnostics[0].summary}",
                address=name,
                hint=f"restore access to {name} (kubeconfig {access.kubeconfig_path()}), or forget "
                f"its objects with `fleetplan state rm` and clean the cluster up by hand",
            )
    return {**clusters, **connected}, {**(accesses or {}), **retired}, problems


def read_set(desired: DesiredFleet, state: State | None) -> dict[Address, str]:
    """Everything a plan reads: desired objects, recorded objects, and journaled addresses."""
    wanted = {
        r.address: str(r.body.get("apiVersion", ""))
        for r in desired.resources
        if handlers.lookup(r.handler).object_backed
    }
    if state is not None:
        for record in state.resources.values():
            wanted.setdefault(record.address, record.api_version)
        for entry in state.journal:
            wanted.setdefault(entry.address, entry.api_version)
    return {a: v for a, v in wanted.items() if v}



def targets_known(graph: ResourceGraph, targets: Sequence[str]) -> None:
    unknown = [t for t in targets if not any(a.matches(t) for a in graph.addresses)]
    if unknown:
        raise PlanError(
            f"--target {unknown[0]} matches nothing in the fleet",
            hint="use `fleetplan state list` or `fleetplan graph` to see addresses",
        )


__all__ = ["Options", "Ref", "decide", "plan_fleet", "preflight_warnings", "read_set", "targets_known"]
