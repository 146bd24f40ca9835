"""Decide the delete steps: what fleetplan created and the configuration (or destroy) drops.

Rules (DESIGN section 4):
- Only what this state created is deleted (`belongs_to_state`): an object the state records with
  the same uid, or one it journaled or (on destroy) desires that carries this state's lineage
  annotation. Labels alone are not enough: two states of fleets with the same name share them.
  An object recorded but gone, no longer labelled, or re-created by someone else is only dropped
  from the state. A delete is preconditioned on the uid the state recorded.
- Destroy refuses `prevent_destroy` resources unless forced; with `force`, every delete step
  carries `options.force` so handlers that guard a removal (the OCM ManifestWork guard) let it
  through.
- On a cluster that could not be read nothing is deleted or dropped from the state: its
  candidates are unknown steps (`unknowns`).
- Delete steps come in reverse dependency order: a step's `depends_on` names its dependents, which
  must be gone first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleetplan.addrs import Address
from fleetplan.errors import Diagnostic, PlanError
from fleetplan.graph.building import ResourceGraph
from fleetplan.live import handlers, reading
from fleetplan.live.clusters import Obj
from fleetplan.plan import unknowns
from fleetplan.plan.model import Action, Mode, Step
from fleetplan.stacks.desired import DesiredResource, Readiness
from fleetplan.state.model import ResourceRecord, State


def belongs_to_state(live: Obj, record: ResourceRecord | None, lineage: str | None) -> bool:
    """Whether a live object with this fleet's labels is the one this state created: the uid
    the state recorded, or (not recorded with that uid: a run killed after creating it) this
    state's lineage annotation. Without a lineage (decide called with neither) labels decide."""
    if record is not None and record.uid and record.uid == live.get("metadata", {}).get("uid"):
        return True
    if record is not None and not record.uid:  # recorded without a uid: nothing else to compare
        return True
    return lineage is None or reading.lineage_of(live) == lineage


def deletions(
    state: State | None,
    snapshot: reading.Snapshot,
    desired: Mapping[Address, DesiredResource],
    graph: ResourceGraph,
    keep: set[Address],
    mode: Mode,
    targets: Sequence[str],
    force: bool,
    warnings: list[Diagnostic],
    lineage: str | None = None,
) -> list[Step]:
    """Delete steps for recorded (or, on destroy, desired) objects outside `keep`, in order."""
    candidates: dict[Address, tuple[str, str, tuple[Address, ...]]] = {}  # address -> api, handler, deps
    if state is not None:
        for recorded in state.resources.values():
            candidates[recorded.address] = (recorded.api_version, recorded.handler, recorded.depends_on)
        for entry in state.journal:
            live = snapshot.owned.get(entry.address)
            if entry.address not in candidates and live is not None and belongs_to_state(live, None, lineage):
                candidates[entry.address] = (entry.api_version, "apply", ())
    if mode == Mode.DESTROY:
        for address, resource in desired.items():
            live = snapshot.owned.get(address)
            if address in candidates or (live is not None and belongs_to_state(live, None, lineage)):
                old = candidates.get(address)
                candidates[address] = (
                    str(resource.body.get("apiVersion", "")),
                    resource.handler.value,
                    tuple(graph.dependencies(address)) if address in graph else (old[2] if old else ()),
                )
    candidates = {a: c for a, c in candidates.items() if a not in keep}
    if targets:
        candidates = {a: c for a, c in candidates.items() if any(a.matches(t) for t in targets)}
    if mode == Mode.REFRESH_ONLY:
        return []
    protected = sorted(str(a) for a in candidates if a in desired and desired[a].prevent_destroy)
    if protected and not force:
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
        if address.cluster in snapshot.unreachable:  # unread: neither deleted nor forgotten
            steps[address] = unknowns.unknown(
                address, handler, api_version, tuple(dependents[address])
            )
            continue
        live = snapshot.owned.get(address)
        record = state.resources.get(address) if state is not None else None
        object_backed = handlers.lookup(handler).object_backed
        foreign = live is not None and object_backed and not belongs_to_state(live, record, lineage)
        forget = object_backed and (live is None or foreign)
        if foreign:
            reason = "was re-created outside this state; dropped from the state, left on the cluster"
            warnings.append(Diagnostic(f"{address} {reason}", address=str(address), severity="warning"))
        elif forget and address in snapshot.unowned:
            reason = "no longer carries this fleet's labels; dropped from the state, left on the cluster"
            warnings.append(Diagnostic(f"{address} {reason}", address=str(address), severity="warning"))
        elif forget:
            reason = "already gone from the cluster; dropped from the state"
        else:
            reason = "destroy" if mode == Mode.DESTROY else "removed from the configuration"
        live_uid = (live or {}).get("metadata", {}).get("uid")
        steps[address] = Step(
            address=address,
            action=Action.DELETE,
            reason=reason,
            handler=handler,
            api_version=api_version,
            depends_on=tuple(sorted(dependents[address], key=str)),
            # The uid the state recorded; the live one only for an object known as ours by its
            # lineage alone (created by a run killed before it could record it).
            live_uid=record.uid if record is not None and record.uid == live_uid else live_uid,
            options={"forget": True} if forget else {"force": True} if force else {},
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


__all__ = ["belongs_to_state", "deletions"]
