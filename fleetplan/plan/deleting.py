"""Decide the delete steps: what fleetplan created and the configuration (or destroy) drops.

Rules (DESIGN section 4):
- Only what the state (or the intent journal) records and still carries the ownership labels is
  deleted; an object recorded but gone, or no longer labelled, is only dropped from the state.
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
from fleetplan.plan import unknowns
from fleetplan.plan.model import Action, Mode, Step
from fleetplan.stacks.desired import DesiredResource, Readiness
from fleetplan.state.model import State


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
) -> list[Step]:
    """Delete steps for recorded (or, on destroy, desired) objects outside `keep`, in order."""
    candidates: dict[Address, tuple[str, str, tuple[Address, ...]]] = {}  # address -> api, handler, deps
    if state is not None:
        for record in state.resources.values():
            candidates[record.address] = (record.api_version, record.handler, record.depends_on)
        for entry in state.journal:
            if entry.address not in candidates and entry.address in snapshot.owned:
                candidates[entry.address] = (entry.api_version, "apply", ())
    if mode == Mode.DESTROY:
        for address, resource in desired.items():
            if address in snapshot.owned or address in candidates:
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
        object_backed = handlers.lookup(handler).object_backed
        forget = object_backed and live is None
        if forget and address in snapshot.unowned:
            reason = "no longer carries this fleet's labels; dropped from the state, left on the cluster"
            warnings.append(Diagnostic(f"{address} {reason}", address=str(address), severity="warning"))
        elif forget:
            reason = "already gone from the cluster; dropped from the state"
        else:
            reason = "destroy" if mode == Mode.DESTROY else "removed from the configuration"
        steps[address] = Step(
            address=address,
            action=Action.DELETE,
            reason=reason,
            handler=handler,
            api_version=api_version,
            depends_on=tuple(sorted(dependents[address], key=str)),
            live_uid=(live or {}).get("metadata", {}).get("uid"),
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


__all__ = ["deletions"]
