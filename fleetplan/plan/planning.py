"""Make a `Plan` from desired resources, the state and what the clusters hold.

`plan_fleet` is the orchestration (graph, batched read, dry-runs, decisions); `decide` is the pure
core it calls once the snapshot and dry-run results are in hand.

Rules (DESIGN section 4):
- Object-backed resources are compared through a server-side apply dry-run restricted to the
  fields fleetplan manages; other handlers decide for themselves (`ResourceHandler.assess`).
- An object that exists without fleetplan's ownership labels is reported and left alone.
- Only what the state (or the intent journal) records and still carries the ownership labels is
  deleted; an object recorded but gone, or no longer labelled, is only dropped from the state.
- A value known only after apply propagates: a changed source marks its consumers changed, and a
  consumer that must be written while its source is unchanged forces the source to run again if
  the source's outputs cannot be read back (a minted token is never stored).
- `--target` keeps the targets and their dependencies; destroy refuses `prevent_destroy` resources
  unless forced; with `force`, every delete step carries `options.force` so handlers that guard a
  removal (the OCM ManifestWork guard) let it through.
- A cluster that has left the fleet but still holds recorded objects is reached the way the state
  recorded (`State.clusters`), so its objects are deleted, not orphaned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from fleetplan.addrs import Address
from fleetplan.diff import comparing
from fleetplan.diff.changes import KNOWN_AFTER_APPLY, SENSITIVE, SENSITIVE_KNOWN_AFTER_APPLY, FieldChange
from fleetplan.errors import ClusterError, Diagnostic, PlanError
from fleetplan.graph.building import ResourceGraph, build_graph
from fleetplan.live import handlers, reading
from fleetplan.live.clusters import Cluster, KubeCluster, Obj
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.plan import bodies
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import DesiredFleet, DesiredResource, Readiness, Ref
from fleetplan.state.model import ResourceRecord, State

DryRun = Callable[[Address, Obj], Obj]
_CHANGING = (Action.CREATE, Action.UPDATE, Action.REPLACE)


@dataclass(frozen=True)
class Options:
    mode: Mode = Mode.NORMAL
    targets: tuple[str, ...] = ()
    force: bool = False  # destroy even prevent_destroy resources
    wait_timeout: float | None = None  # readiness timeout for resources that do not set their own


def plan_fleet(
    desired: DesiredFleet,
    clusters: Mapping[str, Cluster],
    state: State | None,
    options: Options = Options(),
    accesses: Mapping[str, ClusterAccess] | None = None,
) -> Plan:
    """Read the clusters and decide every step; raises `ClusterError` if a cluster cannot be read."""
    clusters, accesses = _with_retired_clusters(clusters, accesses, state)
    graph = build_graph(desired.resources)
    wanted = read_set(desired, state)
    snapshot, problems = reading.read_snapshot(clusters, desired.fleet_name, wanted)
    if problems:
        raise ClusterError(problems)

    def dry_run(address: Address, body: Obj) -> Obj:
        return clusters[address.cluster].apply(body, dry_run=True)

    plan = decide(desired, graph, state, snapshot, dry_run, options)
    return replace(
        plan,
        warnings=(*preflight_warnings(desired, clusters), *plan.warnings),
        fingerprint=snapshot.fingerprint(wanted),
        read_set=tuple(sorted(wanted.items(), key=lambda item: str(item[0]))),
        clusters=dict(accesses or {}),
    )


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
) -> tuple[Mapping[str, Cluster], Mapping[str, ClusterAccess] | None]:
    """Add connections to clusters the fleet no longer names but the state still holds objects on."""
    if state is None:
        return clusters, accesses
    held = {a.cluster for a in state.resources} | {e.address.cluster for e in state.journal}
    retired = {
        name: ClusterAccess.from_dict(dict(state.clusters[name]))
        for name in sorted(held)
        if name not in clusters and name in state.clusters
    }
    if not retired:
        return clusters, accesses
    connected: dict[str, Cluster] = {}
    problems: list[Diagnostic] = []
    for name, access in retired.items():
        try:
            connected[name] = KubeCluster(access)
        except ClusterError as err:
            problems.append(
                Diagnostic(
                    f"cluster {name} left the fleet but the state still holds objects fleetplan created "
                    f"there, and it cannot be reached to delete them: {err.diagnostics[0].summary}",
                    address=name,
                    hint=f"restore access to {name} (kubeconfig {access.kubeconfig_path()}), or forget "
                    f"its objects with `fleetplan state rm` and clean the cluster up by hand",
                )
            )
    if problems:
        raise ClusterError(problems)
    return {**clusters, **connected}, {**(accesses or {}), **retired}


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


def decide(
    desired: DesiredFleet,
    graph: ResourceGraph,
    state: State | None,
    snapshot: reading.Snapshot,
    dry_run: DryRun,
    options: Options = Options(),
    now: float | None = None,
) -> Plan:
    now = time.time() if now is None else now
    fleet = desired.fleet_name
    by_address = desired.by_address()
    if options.targets:
        graph = graph.narrowed_to(options.targets)
    warnings: list[Diagnostic] = []
    steps: dict[Address, Step] = {}
    if options.mode != Mode.DESTROY:
        for address in graph.creation_order():
            resource = by_address[address]
            step = _decide_one(resource, graph, state, snapshot, dry_run, fleet, now, warnings, options)
            steps[address] = step
        if options.mode == Mode.NORMAL:
            _propagate_unknowns(steps, by_address)
    keep = set(graph.addresses) if options.mode != Mode.DESTROY else set()
    deletions = _deletions(state, snapshot, by_address, graph, keep, fleet, options, warnings)
    ordered = [steps[a] for a in graph.creation_order() if a in steps] + deletions
    return Plan(
        fleet=fleet,
        mode=options.mode,
        steps=tuple(ordered),
        lineage=state.lineage if state else None,
        serial=state.serial if state else 0,
        fingerprint="",
        warnings=tuple(warnings),
        targets=options.targets,
        created_at=datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
    )


def _decide_one(
    resource: DesiredResource,
    graph: ResourceGraph,
    state: State | None,
    snapshot: reading.Snapshot,
    dry_run: DryRun,
    fleet: str,
    now: float,
    warnings: list[Diagnostic],
    options: Options,
) -> Step:
    mode = options.mode
    address = resource.address
    handler = handlers.lookup(resource.handler)
    if resource.readiness.timeout_seconds is None and options.wait_timeout is not None:
        resource = replace(
            resource, readiness=replace(resource.readiness, timeout_seconds=options.wait_timeout)
        )
    record = state.resources.get(address) if state else None
    journaled = state.journal_for(address) if state else None
    body = reading.owned_body(resource.body, fleet) if handler.object_backed else dict(resource.body)
    base = Step(
        address=address,
        action=Action.NOOP,
        reason="",
        handler=resource.handler.value,
        api_version=str(resource.body.get("apiVersion", "")),
        body=body,
        depends_on=tuple(sorted(graph.dependencies(address), key=str)),
        readiness=resource.readiness,
        options=dict(resource.options),
        sensitive_paths=tuple(sorted(resource.sensitive_paths)),
        body_hash=bodies.body_hash(body),
        graph_dependencies=tuple(sorted(graph.dependencies(address), key=str)),
    )
    if not handler.object_backed:
        verdict = handler.assess(
            handlers.AssessInput(
                address,
                resource.options,
                record is not None,
                dict(record.outputs) if record else {},
                snapshot.owned,
                now,
            )
        )
        action = Action(verdict.action)
        if mode == Mode.REFRESH_ONLY:
            action = Action.NOOP
        return replace(base, action=action, reason=verdict.reason)
    if address in snapshot.unowned:
        warnings.append(
            Diagnostic(
                f"{address.kind} {address.name} already exists on {address.cluster} but was "
                "not created by this fleet; fleetplan leaves it alone",
                address=str(address),
                hint="delete or rename it, or add the labels "
                f"{reading.selector(fleet)} to let fleetplan manage it",
                severity="warning",
            )
        )
        return replace(base, reason="exists but not created by fleetplan; left alone")
    live = snapshot.owned.get(address)
    live_uid = (live or {}).get("metadata", {}).get("uid")
    base = replace(base, live_uid=live_uid)
    if live is None:
        if mode == Mode.REFRESH_ONLY:
            if record is None:
                return replace(base, reason="not created yet")
            return replace(base, action=Action.READ, reason="deleted outside fleetplan")
        reason = "deleted outside fleetplan; re-create" if record else "not on the cluster"
        return replace(base, action=Action.CREATE, reason=reason, changes=_additions(body, resource))
    unknown = dict(bodies.ref_paths(body))
    changes: tuple[FieldChange, ...] = ()
    if not _unchanged_since_apply(body, base.body_hash, live, record, unknown):
        probe = bodies.substitute(body, lambda leaf: bodies.DROP)
        for path in unknown:  # keep what is live where the value is not known yet, so it is not a diff
            current = bodies.lookup(live, path)
            if current is not None:
                probe = _set_path(probe, path, current)
        try:
            merged = dry_run(address, probe)
        except ClusterError as err:
            if "immutable" in str(err).lower():
                return replace(
                    base,
                    action=Action.REPLACE,
                    reason=f"an immutable field changed ({err.diagnostics[0].summary})",
                    changes=_additions(body, resource),
                )
            raise
        changes = tuple(
            c
            for c in comparing.compare(
                live, merged, sensitive_paths=resource.sensitive_paths, ignore_paths=resource.ignore_paths
            )
            if not any(_under(c.path, p) for p in unknown)
        )
    if mode == Mode.REFRESH_ONLY:
        drifted = bool(changes) and record is not None and record.applied_hash == base.body_hash
        return replace(
            base,
            action=Action.READ if drifted else Action.NOOP,
            changes=changes if drifted else (),
            reason="changed outside fleetplan" if drifted else "matches the state",
        )
    if not changes:
        adopted = record is None and journaled is not None
        return replace(base, reason="adopt: created by an interrupted run" if adopted else "up to date")
    if record is not None and record.applied_hash == base.body_hash:
        reason = "changed outside fleetplan (drift)"
    elif record is None:
        reason = "finish an interrupted run" if journaled else "adopt and update"
    else:
        reason = "configuration changed"
    return replace(base, action=Action.UPDATE, reason=reason, changes=changes)


def _unchanged_since_apply(
    body: Obj, body_hash: str, live: Obj, record: ResourceRecord | None, unknown: Mapping[str, Any]
) -> bool:
    """True when a dry-run could only confirm "no change", so it is skipped (one request less per
    object on a converged fleet): the body is what the state says was applied last (so fleetplan
    manages the same fields and has nothing to remove), the live object is the one recorded, no
    value is known only after apply, and every value of the body is already live. Anything else,
    including a value the server normalises (`0.5` vs `500m`), falls back to the dry-run."""
    return (
        not unknown
        and record is not None
        and record.applied_hash == body_hash
        and record.uid is not None
        and record.uid == live.get("metadata", {}).get("uid")
        and _covers(live, body)
    )


def _covers(live: Any, desired: Any) -> bool:
    """Every value in `desired` is in `live` at the same path (lists: same length, item by item)."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and _covers(live[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(_covers(have, want) for have, want in zip(live, desired, strict=True))
        )
    return type(live) is type(desired) and bool(live == desired)


def _propagate_unknowns(steps: dict[Address, Step], resources: Mapping[Address, DesiredResource]) -> None:
    """Fixpoint: consumers of changing sources change; sources whose value is needed run again."""
    changed = True
    while changed:
        changed = False
        for address, step in steps.items():
            for path, leaf in bodies.ref_paths(step.body or {}):
                for source in bodies.sources(leaf):
                    src = steps.get(source)
                    if src is None:
                        continue
                    if src.action in _CHANGING and step.action in (Action.NOOP,) and step.live_uid:
                        steps[address] = step = replace(
                            step, action=Action.UPDATE, reason=f"a value from {source} changes"
                        )
                        changed = True
                    if (
                        step.action in _CHANGING
                        and src.action in (Action.NOOP, Action.READ)
                        and not handlers.lookup(src.handler).outputs_readable
                    ):
                        steps[source] = replace(
                            src, action=Action.UPDATE, reason=f"run again: {address} needs its value"
                        )
                        changed = True
                    if step.action in _CHANGING and not any(c.path == path for c in step.changes):
                        masked = SENSITIVE_KNOWN_AFTER_APPLY if leaf.sensitive else KNOWN_AFTER_APPLY
                        steps[address] = step = replace(
                            step,
                            changes=(
                                *step.changes,
                                FieldChange(
                                    path, None if step.action == Action.CREATE else SENSITIVE, masked
                                ),
                            ),
                        )
        for address, step in steps.items():  # operations re-run when a dependency is (re)created
            if (
                step.action == Action.NOOP
                and not handlers.lookup(step.handler).object_backed
                and any(
                    steps[d].action in (Action.CREATE, Action.REPLACE) for d in step.depends_on if d in steps
                )
            ):
                steps[address] = replace(
                    step, action=Action.UPDATE, reason="a dependency is being (re)created"
                )
                changed = True


def _deletions(
    state: State | None,
    snapshot: reading.Snapshot,
    desired: Mapping[Address, DesiredResource],
    graph: ResourceGraph,
    keep: set[Address],
    fleet: str,
    options: Options,
    warnings: list[Diagnostic],
) -> list[Step]:
    candidates: dict[Address, tuple[str, str, tuple[Address, ...]]] = {}  # address -> api, handler, deps
    if state is not None:
        for record in state.resources.values():
            candidates[record.address] = (record.api_version, record.handler, record.depends_on)
        for entry in state.journal:
            if entry.address not in candidates and entry.address in snapshot.owned:
                candidates[entry.address] = (entry.api_version, "apply", ())
    if options.mode == Mode.DESTROY:
        for address, resource in desired.items():
            if address in snapshot.owned or address in candidates:
                old = candidates.get(address)
                candidates[address] = (
                    str(resource.body.get("apiVersion", "")),
                    resource.handler.value,
                    tuple(graph.dependencies(address)) if address in graph else (old[2] if old else ()),
                )
    candidates = {a: c for a, c in candidates.items() if a not in keep}
    if options.targets:
        candidates = {a: c for a, c in candidates.items() if any(a.matches(t) for t in options.targets)}
    if options.mode == Mode.REFRESH_ONLY:
        return []
    protected = sorted(str(a) for a in candidates if a in desired and desired[a].prevent_destroy)
    if protected and not options.force:
        raise PlanError(
            [
                Diagnostic(
                    f"destroy would delete {a}, which lifecycle.preventDestroy protects",
                    address=a,
                    hint="remove its cluster from spec.lifecycle.preventDestroy, or pass --force",
                )
                for a in protected
            ]
        )
    dependents: dict[Address, set[Address]] = {a: set() for a in candidates}
    for address, (_, _, deps) in candidates.items():
        for dependency in deps:
            if dependency in dependents:
                dependents[dependency].add(address)
    steps: dict[Address, Step] = {}
    for address, (api_version, handler, _deps) in candidates.items():
        live = snapshot.owned.get(address)
        object_backed = handlers.lookup(handler).object_backed
        forget = object_backed and live is None
        if forget and address in snapshot.unowned:
            reason = "no longer carries this fleet's labels; dropped from the state, left on the cluster"
            warnings.append(Diagnostic(f"{address} {reason}", address=str(address), severity="warning"))
        elif forget:
            reason = "already gone from the cluster; dropped from the state"
        else:
            reason = "destroy" if options.mode == Mode.DESTROY else "removed from the configuration"
        steps[address] = Step(
            address=address,
            action=Action.DELETE,
            reason=reason,
            handler=handler,
            api_version=api_version,
            depends_on=tuple(sorted(dependents[address], key=str)),
            live_uid=(live or {}).get("metadata", {}).get("uid"),
            options={"forget": True} if forget else {"force": True} if options.force else {},
            readiness=desired[address].readiness if address in desired else Readiness(),
        )
    return [steps[a] for a in _deletion_order(steps)]


def _deletion_order(steps: Mapping[Address, Step]) -> list[Address]:
    """Dependents first (a step after everything in its depends_on), ties by address."""
    done: list[Address] = []
    remaining = dict(steps)
    while remaining:
        ready = sorted(
            (a for a, s in remaining.items() if all(d not in remaining for d in s.depends_on)), key=str
        )
        if not ready:  # a cycle in recorded dependencies: fall back to address order
            ready = sorted(remaining, key=str)
        for address in ready:
            done.append(address)
            del remaining[address]
    return done


def _additions(body: Mapping[str, Any], resource: DesiredResource) -> tuple[FieldChange, ...]:
    shown = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
    plain = bodies.substitute(
        shown, lambda leaf: SENSITIVE_KNOWN_AFTER_APPLY if leaf.sensitive else KNOWN_AFTER_APPLY
    )
    sensitive = set(resource.sensitive_paths)
    if body.get("kind") == "Secret" and body.get("apiVersion") == "v1":
        sensitive |= {"data", "stringData"}
    changes = comparing.diff_values({}, plain, sensitive_paths=sensitive)
    return changes


def _set_path(obj: Any, path: str, value: Any) -> Any:
    parts = path.split(".")
    out = dict(obj)
    cursor = out
    for part in parts[:-1]:
        nxt = cursor.get(part)
        cursor[part] = dict(nxt) if isinstance(nxt, Mapping) else {}
        cursor = cursor[part]
    cursor[parts[-1]] = value
    return out


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")


def targets_known(graph: ResourceGraph, targets: Sequence[str]) -> None:
    unknown = [t for t in targets if not any(a.matches(t) for a in graph.addresses)]
    if unknown:
        raise PlanError(
            f"--target {unknown[0]} matches nothing in the fleet",
            hint="use `fleetplan state list` or `fleetplan graph` to see addresses",
        )


__all__ = ["Options", "Ref", "decide", "plan_fleet", "read_set", "targets_known"]
