"""Decide one step per desired resource from the state and what was read: the pure core of planning.

`decide` turns desired resources, the state, a `Snapshot` and a dry-run function into a `Plan`; it
does no I/O of its own (the dry-run is passed in), so it is tested with small fakes. Deletions are
decided in `deleting`; reading the clusters is `planning.plan_fleet`'s job.

Rules (DESIGN section 4):
- Object-backed resources are compared through a server-side apply dry-run restricted to the
  fields fleetplan manages; other handlers decide for themselves (`ResourceHandler.assess`).
- An object that exists without fleetplan's ownership labels is reported and left alone; so is one
  with the labels that this state did not create (`deleting.belongs_to_state`: another state of a
  fleet with the same name, or re-created by someone else). Bodies carry the state's lineage
  annotation, so what this state creates is recognised even before it is recorded.
- A value known only after apply propagates: a changed source marks its consumers changed, and a
  consumer that must be written while its source is unchanged forces the source to run again if
  the source's outputs cannot be read back (a minted token is never stored).
- `--target` keeps the targets and their dependencies.
- A cluster that could not be read gets no decisions: its steps are unknown (`unknowns`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from fleetplan.addrs import Address
from fleetplan.diff import comparing
from fleetplan.diff.changes import KNOWN_AFTER_APPLY, SENSITIVE, SENSITIVE_KNOWN_AFTER_APPLY, FieldChange
from fleetplan.errors import ClusterError, Diagnostic
from fleetplan.graph.building import ResourceGraph
from fleetplan.live import handlers, reading
from fleetplan.live.clusters import Obj
from fleetplan.plan import bodies, unknowns
from fleetplan.plan.deleting import belongs_to_state, deletions
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import DesiredFleet, DesiredResource
from fleetplan.state.model import ResourceRecord, State

DryRun = Callable[[Address, Obj], Obj]
_CHANGING = (Action.CREATE, Action.UPDATE, Action.REPLACE)


@dataclass(frozen=True)
class Options:
    mode: Mode = Mode.NORMAL
    targets: tuple[str, ...] = ()
    force: bool = False  # destroy even prevent_destroy resources
    wait_timeout: float | None = None  # readiness timeout for resources that do not set their own
    new_lineage: str | None = None  # with no state: the lineage the first state will take


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
            if address.cluster in snapshot.unreachable:  # nothing known there: decide nothing
                steps[address] = unknowns.unknown(
                    address,
                    resource.handler.value,
                    str(resource.body.get("apiVersion", "")),
                    tuple(graph.dependencies(address)),
                )
                continue
            step = _decide_one(resource, graph, state, snapshot, dry_run, fleet, now, warnings, options)
            steps[address] = step
        if options.mode == Mode.NORMAL:
            _propagate_unknowns(steps, by_address)
    keep = set(graph.addresses) if options.mode != Mode.DESTROY else set()
    removals = deletions(state, snapshot, by_address, graph, keep, options.mode, options.targets,
                         options.force, warnings, _lineage(state, options))
    ordered = [steps[a] for a in graph.creation_order() if a in steps] + removals
    roots, errors = unknowns.roots(ordered, snapshot.unreachable)
    ordered = roots + ordered
    warnings = [*errors, *warnings]
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
        new_lineage=options.new_lineage if state is None else None,
    )


def _lineage(state: State | None, options: Options) -> str | None:
    return state.lineage if state is not None else options.new_lineage


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
    lineage = _lineage(state, options)
    body = reading.owned_body(resource.body, fleet, lineage) if handler.object_backed else dict(resource.body)
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
    if live is not None and not belongs_to_state(live, record, lineage):
        warnings.append(
            Diagnostic(
                f"{address.kind} {address.name} on {address.cluster} carries this fleet's labels but "
                "was not created by this state; fleetplan leaves it alone",
                address=str(address),
                hint="another state of a fleet with the same name manages it, or it was re-created "
                "outside fleetplan: delete it, or plan with the state that created it",
                severity="warning",
            )
        )
        return replace(base, reason="created by another state of this fleet; left alone")
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


__all__ = ["DryRun", "Options", "decide"]
