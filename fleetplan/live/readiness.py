"""What "ready" means for each `ReadinessKind`, and waiting for it with progress and a timeout.

Invariants: `check` is one read and never raises for "not ready yet" (it returns why not);
`wait_ready` polls until ready or the timeout, reporting what it awaits through `progress` about
every `report_every` seconds, and raises `ClusterError` naming the object and the last reason.
A transient read failure (throttling, 5xx, a dropped connection) during the wait is one more "not
ready yet": the wait rides it out until its own deadline instead of raising, so a caller's retry
never restarts a wait that was nearly done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from fleetplan.errors import ClusterError
from fleetplan.live.clusters import Cluster, Obj, TransientClusterError
from fleetplan.stacks.desired import Readiness, ReadinessKind

Progress = Callable[[str], None]


def check(cluster: Cluster, obj: Mapping[str, Any] | None, readiness: Readiness) -> tuple[bool, str]:
    """(ready, what is still awaited) for an object as just read."""
    kind = readiness.kind
    if kind == ReadinessKind.NONE:
        return True, ""
    if obj is None:
        return False, "the object to appear"
    status = obj.get("status") or {}
    if kind == ReadinessKind.EXISTS:
        return True, ""
    if kind == ReadinessKind.ESTABLISHED:
        return _condition(status, "Established", "True")
    if kind == ReadinessKind.CONDITION:
        return _condition(status, readiness.condition_type or "Ready", readiness.condition_status)
    if kind == ReadinessKind.AVAILABLE:
        return _deployment_available(obj)
    if kind == ReadinessKind.WEBHOOK:
        return _webhooks_answer(cluster, obj)
    return False, f"unknown readiness kind {kind}"


def wait_ready(
    cluster: Cluster,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    readiness: Readiness,
    *,
    timeout: float,
    progress: Progress,
    poll: float = 1.0,
    report_every: float = 10.0,
) -> Obj | None:
    """Wait until the object is ready; returns it as last read (None for `ReadinessKind.NONE`)."""
    if readiness.kind == ReadinessKind.NONE:
        return None
    what = readiness.description or f"{kind} {name} {readiness.kind.value} on {cluster.name}"
    deadline = time.monotonic() + timeout
    next_report = time.monotonic()
    reason = ""
    while True:
        try:
            obj = cluster.get(api_version, kind, namespace, name)
            ready, reason = check(cluster, obj, readiness)
        except TransientClusterError as err:
            ready, reason = False, f"the API server to answer ({err.diagnostics[0].summary})"
        if ready:
            return obj
        now = time.monotonic()
        if now >= deadline:
            raise ClusterError(
                f"cluster {cluster.name}: timed out after {timeout:.0f}s waiting for {what}: "
                f"still waiting for {reason}",
                hint="raise spec.wait.timeout or look at the object's status and events",
            )
        if now >= next_report:
            progress(f"waiting for {what} ({reason})")
            next_report = now + report_every
        time.sleep(min(poll, max(0.0, deadline - now)))


def _condition(status: Mapping[str, Any], type_: str, wanted: str) -> tuple[bool, str]:
    for condition in status.get("conditions") or ():
        if condition.get("type") == type_:
            if condition.get("status") == wanted:
                return True, ""
            return (
                False,
                f"condition {type_}={wanted} (is {condition.get('status')}: {condition.get('message', '')})",
            )
    return False, f"condition {type_}={wanted}"


def _deployment_available(obj: Mapping[str, Any]) -> tuple[bool, str]:
    """The rollout is complete, judged as `kubectl rollout status` does: the controller saw this
    generation, every wanted replica runs the new template, no old replica is left (old pods would
    still serve the old version), and every updated replica is available."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    generation = obj.get("metadata", {}).get("generation", 0)
    wanted = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < generation:
        return False, "the controller to observe the new generation"
    # Status counters are omitted when zero.
    replicas, updated = status.get("replicas", 0), status.get("updatedReplicas", 0)
    available = status.get("availableReplicas", 0)
    stuck = next(
        (c for c in status.get("conditions") or () if c.get("type") == "Progressing"
         and c.get("reason") == "ProgressDeadlineExceeded"),
        None,
    )
    if stuck is not None:
        return False, f"a rollout past its progress deadline ({stuck.get('message', '')})"
    if updated < wanted:
        return False, f"{updated} of {wanted} replicas updated"
    if replicas > updated:
        return False, f"{replicas - updated} old replica(s) to terminate"
    if available < updated:
        return False, f"{available} of {updated} updated replicas available"
    return True, ""


def _webhooks_answer(cluster: Cluster, obj: Mapping[str, Any]) -> tuple[bool, str]:
    """Every service-backed webhook's Service has a ready endpoint (URL webhooks are external)."""
    for hook in obj.get("webhooks") or ():
        service = (hook.get("clientConfig") or {}).get("service")
        if not service:
            continue
        slices = cluster.list(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            service["namespace"],
            f"kubernetes.io/service-name={service['name']}",
        )
        ready = any(
            (e.get("conditions") or {}).get("ready", True) for s in slices for e in s.get("endpoints") or ()
        )
        if not ready:
            return False, f"a ready endpoint behind service {service['namespace']}/{service['name']}"
    return True, ""
