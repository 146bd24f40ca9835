"""Steps on clusters that could not be read: unknown, and failed at apply with one root cause.

DESIGN section 5: a failed member does not stop the others. When the batched read cannot reach a
cluster (`Snapshot.unreachable`), nothing about its objects is known, so none of its steps can be
decided: each becomes an `UNKNOWN` step that depends on one `unreachable_root` step per cluster.
Apply fails that root with "cluster X unreachable: <reason>", so the cluster's steps and every
step that depends on them (on any cluster) are skipped with that root cause, the other clusters
converge, and the run exits non-zero naming the cluster.

Invariants:
- An unknown step never has side effects and never touches the state: its record (if any) and
  its journal entry stay as they were, so the next plan re-reads exactly what this one could not.
- The reason is a diagnostic in `Plan.warnings` with severity "error", so `plan` shows it and exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetplan.addrs import Address
from fleetplan.errors import Diagnostic
from fleetplan.live.reading import OPERATION_GROUP
from fleetplan.plan.model import Action, Step

ROOT_KIND = "Cluster"
REASON_OPTION = "unreachable"  # Step.options key holding why the cluster could not be read


def root_address(cluster: str) -> Address:
    return Address(cluster, OPERATION_GROUP, ROOT_KIND, "", cluster)


def is_root(step: Step) -> bool:
    return step.action == Action.UNKNOWN and REASON_OPTION in step.options


def reason(cluster: str, problem: Diagnostic) -> str:
    """`cluster X unreachable: <why>` (the border's "cluster X: " prefix is not repeated)."""
    why = problem.summary.removeprefix(f"cluster {cluster}: ").removeprefix(f"cluster {cluster} ")
    return f"cluster {cluster} unreachable: {why}"


def unknown(address: Address, handler: str, api_version: str, depends_on: tuple[Address, ...]) -> Step:
    """The step for `address` on an unreachable cluster: after its cluster's root, nothing done."""
    root = root_address(address.cluster)
    return Step(
        address=address,
        action=Action.UNKNOWN,
        reason=f"unknown: cluster {address.cluster} could not be read",
        handler=handler,
        api_version=api_version,
        depends_on=tuple(sorted({*depends_on, root}, key=str)),
    )


def roots(steps: list[Step], unreachable: Mapping[str, Diagnostic]) -> tuple[list[Step], list[Diagnostic]]:
    """One failing root step and one error diagnostic per unreachable cluster that has steps."""
    counts: dict[str, int] = {}
    for step in steps:
        if step.action == Action.UNKNOWN:
            counts[step.address.cluster] = counts.get(step.address.cluster, 0) + 1
    made: list[Step] = []
    errors: list[Diagnostic] = []
    for cluster in sorted(counts):
        problem = unreachable[cluster]
        text = reason(cluster, problem)
        made.append(
            Step(
                address=root_address(cluster),
                action=Action.UNKNOWN,
                reason=text,
                options={REASON_OPTION: text},
            )
        )
        errors.append(
            Diagnostic(
                f"{text}; its {counts[cluster]} step(s) are unknown and nothing on it will change",
                address=cluster,
                hint=problem.hint
                or f"check that {cluster}'s API server is up and its kubeconfig points at it; the other "
                "clusters are planned and applied without it",
            )
        )
    return made, errors


__all__ = ["REASON_OPTION", "is_root", "reason", "root_address", "roots", "unknown"]
