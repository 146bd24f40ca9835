"""The plan value: a closed `Action` enum, frozen `Step`s and the `Plan` that orders them.

Invariants:
- A `Plan` is a value: tuples and frozen dataclasses only, no clients, no config.
- `steps` are in execution order (creation order for create/update/replace, reverse dependency
  order for deletes); `Step.depends_on` names the steps that must succeed first, so the walker can
  run independent steps in parallel and skip dependents of a failure.
- `reason` is for people; apply never branches on it.
- Bodies may hold `Ref`s (values known after apply) but never a secret value; sensitive literals are
  replaced by a hash when a plan is saved (see `planfile`).
- A step on a cluster that could not be read is `UNKNOWN` and depends on that cluster's
  `unreachable_root` step, which apply fails with the reason: the cluster's steps and their
  dependents are skipped with that one root cause while the other clusters converge; the reason is
  also an error in `warnings` (`Plan.errors`).
- `lineage`/`serial` are the state's at planning time (`lineage is None`: no state existed; then
  `new_lineage` is the lineage the first state takes, already written into the bodies) and
  `fingerprint` digests what was read from the clusters, so a stale saved plan is detected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleetplan.addrs import Address
from fleetplan.diff.changes import FieldChange
from fleetplan.errors import Diagnostic
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.stacks.desired import Readiness

FORMAT_VERSION = 1


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    NOOP = "no-op"
    READ = "read"
    UNKNOWN = "unknown"  # on a cluster that could not be read: apply fails it, changing nothing

    @property
    def has_side_effects(self) -> bool:
        return self in (Action.CREATE, Action.UPDATE, Action.REPLACE, Action.DELETE)


class Mode(StrEnum):
    NORMAL = "normal"
    DESTROY = "destroy"
    REFRESH_ONLY = "refresh-only"


@dataclass(frozen=True)
class Step:
    address: Address
    action: Action
    reason: str
    handler: str = "apply"
    api_version: str = ""
    # desired body (with ownership labels); None for delete. Out of repr: a Secret's data is in it.
    body: Mapping[str, Any] | None = field(default=None, repr=False)
    depends_on: tuple[Address, ...] = ()
    changes: tuple[FieldChange, ...] = ()
    readiness: Readiness = field(default_factory=Readiness)
    options: Mapping[str, Any] = field(default_factory=dict)
    sensitive_paths: tuple[str, ...] = ()
    live_uid: str | None = None  # the object's uid as read; deletes are preconditioned on it
    body_hash: str = ""  # hash of the desired body; recorded in state as the applied hash
    graph_dependencies: tuple[Address, ...] = ()  # recorded in state to order later deletions


@dataclass(frozen=True)
class Plan:
    fleet: str
    mode: Mode
    steps: tuple[Step, ...]
    lineage: str | None
    serial: int
    fingerprint: str
    read_set: tuple[tuple[Address, str], ...] = ()  # (address, apiVersion) of everything read
    clusters: Mapping[str, ClusterAccess] = field(default_factory=dict)
    warnings: tuple[Diagnostic, ...] = ()
    targets: tuple[str, ...] = ()
    created_at: str = ""
    format_version: int = FORMAT_VERSION
    # With no state yet (`lineage is None`): the lineage the first state must take, because the
    # plan's bodies already carry it in their lineage annotation.
    new_lineage: str | None = None

    def counts(self) -> tuple[int, int, int]:
        """(to add, to change, to destroy), counted like Terraform: a replace adds and destroys."""
        add = change = destroy = 0
        for step in self.steps:
            if step.action == Action.CREATE:
                add += 1
            elif step.action == Action.UPDATE:
                change += 1
            elif step.action == Action.DELETE:
                destroy += 1
            elif step.action == Action.REPLACE:
                add += 1
                destroy += 1
        return add, change, destroy

    @property
    def has_changes(self) -> bool:
        if self.mode == Mode.REFRESH_ONLY:
            return any(s.action == Action.READ for s in self.steps)
        return any(s.action.has_side_effects for s in self.steps)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """Problems that make this plan incomplete (an unreachable cluster): `plan` exits 1."""
        return tuple(d for d in self.warnings if d.severity == "error")

    def step(self, address: Address) -> Step | None:
        return next((s for s in self.steps if s.address == address), None)
