"""What a Fleet resource's `status` says after a reconcile: pure functions from outcomes to conditions.

Conditions follow the Kubernetes convention (`metav1.Condition`): `Ready`, `Progressing` and
`Degraded` for the whole fleet, and one `clusters.fleetplan.dev/<cluster>` per cluster, True when
every step on that cluster succeeded. `merge_conditions` keeps a condition's lastTransitionTime
when its status did not change, so the time says when it last flipped, not when it was last
written. Messages carry diagnostics' summaries only: they never hold secret values (the engine's
diagnostics never do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fleetplan.apply.hooks import ApplySummary, Status
from fleetplan.errors import Diagnostic
from fleetplan.plan.model import Plan

CLUSTER_PREFIX = "clusters.fleetplan.dev/"
MAX_MESSAGE = 1000


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""

    def as_dict(self, generation: int, now: str) -> dict[str, Any]:
        return {"type": self.type, "status": self.status, "reason": self.reason,
                "message": self.message[:MAX_MESSAGE], "observedGeneration": generation,
                "lastTransitionTime": now}


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _messages(diagnostics: Iterable[Diagnostic]) -> str:
    return "; ".join(d.summary for d in diagnostics)


def fleet_conditions(ready: bool, progressing: bool, degraded: bool, reason: str,
                     message: str) -> list[Condition]:
    return [
        Condition("Ready", str(ready), reason, message),
        Condition("Progressing", str(progressing), reason, message if progressing else ""),
        Condition("Degraded", str(degraded), reason if degraded else "AsExpected", message if degraded else ""),
    ]


def applied(clusters: Sequence[str], plan: Plan, summary: ApplySummary) -> list[Condition]:
    """Conditions after a plan was walked: per cluster, then Ready/Progressing/Degraded."""
    per_cluster = []
    failed_total = 0
    for name in clusters:
        failures = [o for o in summary.failures if o.step.address.cluster == name]
        skipped = [o for o in summary.skipped if o.step.address.cluster == name]
        count = sum(1 for s in plan.steps if s.address.cluster == name)
        if failures:
            failed_total += len(failures)
            text = _messages(o.error or Diagnostic("failed", address=str(o.step.address)) for o in failures)
            per_cluster.append(Condition(CLUSTER_PREFIX + name, "False", "ApplyFailed", text))
        elif skipped:
            causes = sorted({str(o.root_cause) for o in skipped})
            per_cluster.append(Condition(CLUSTER_PREFIX + name, "False", "DependencyFailed",
                                         f"{len(skipped)} step(s) skipped because {', '.join(causes)} failed"))
        else:
            per_cluster.append(Condition(CLUSTER_PREFIX + name, "True", "Converged",
                                         f"{count} resource(s) in the desired state"))
    if failed_total or summary.skipped:
        bad = [c.type.removeprefix(CLUSTER_PREFIX) for c in per_cluster if c.status != "True"]
        fleet = fleet_conditions(False, False, True, "ApplyFailed", f"not converged: {', '.join(bad)}")
    else:
        fleet = fleet_conditions(True, False, False, "Converged", f"{len(clusters)} cluster(s) converged")
    return per_cluster + fleet


def failed(clusters: Sequence[str], reason: str, diagnostics: Sequence[Diagnostic]) -> list[Condition]:
    """Conditions when no plan could be walked (invalid spec, unreachable cluster, refused destroy).

    A cluster a diagnostic names (`cluster X: ...`) gets False with the reason; the others Unknown.
    """
    text = _messages(diagnostics)
    per_cluster = []
    for name in clusters:
        mine = [d for d in diagnostics if f"cluster {name}:" in d.summary or (d.address or "").startswith(name + "/")]
        if mine:
            per_cluster.append(Condition(CLUSTER_PREFIX + name, "False", reason, _messages(mine)))
        else:
            per_cluster.append(Condition(CLUSTER_PREFIX + name, "Unknown", reason, "not reconciled: " + text))
    return per_cluster + fleet_conditions(False, False, True, reason, text)


def progressing(clusters: Sequence[str], plan: Plan, previous: Sequence[Mapping[str, Any]]) -> list[Condition]:
    """While a plan with changes is being applied: Progressing True, others as they were."""
    add, change, destroy = plan.counts()
    kept = [Condition(str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message", "")))
            for c in previous if c.get("type") not in ("Progressing",)]
    return [*kept, Condition("Progressing", "True", "Applying",
                             f"applying {add} to add, {change} to change, {destroy} to destroy")]


def merge_conditions(previous: Sequence[Mapping[str, Any]], new: Sequence[Condition], generation: int,
                     now: str | None = None) -> list[dict[str, Any]]:
    """`new` as dicts; lastTransitionTime kept from `previous` where the status is unchanged."""
    stamp = now or now_text()
    before = {str(c.get("type")): c for c in previous}
    out = []
    for cond in new:
        item = cond.as_dict(generation, stamp)
        old = before.get(cond.type)
        if old is not None and old.get("status") == cond.status and old.get("lastTransitionTime"):
            item["lastTransitionTime"] = old["lastTransitionTime"]
        out.append(item)
    return out


def plan_summary(plan: Plan, summary: ApplySummary | None, when: str | None = None) -> dict[str, Any]:
    add, change, destroy = plan.counts()
    done_add, done_change, done_destroy = summary.counts() if summary else (0, 0, 0)
    failures = len(summary.failures) if summary else 0
    text = (f"Plan: {add} to add, {change} to change, {destroy} to destroy."
            if plan.has_changes else "No changes.")
    if summary and plan.has_changes:
        text += f" Applied: {done_add} added, {done_change} changed, {done_destroy} destroyed"
        text += f", {failures} failed." if failures else "."
    return {"time": when or now_text(), "mode": plan.mode.value, "add": add, "change": change,
            "destroy": destroy, "failed": failures, "summary": text}


def is_status_ok(status: Mapping[str, Any], condition: str = "Ready") -> bool:
    return any(c.get("type") == condition and c.get("status") == "True" for c in status.get("conditions") or [])


def outcome_counts(summary: ApplySummary) -> dict[str, int]:
    return {s.value: sum(1 for o in summary.outcomes if o.status == s) for s in Status}
