"""Retries in apply, with a small fake cluster: only writes are retried, waits ride out transient
read failures until their own deadline, and every retry delay stops at the deadline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from fleetplan.addrs import Address
from fleetplan.apply.executing import ClusterExecutor
from fleetplan.live.clusters import MAX_BACKOFF, ResourceInfo, TransientClusterError, retry_delay
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import Readiness, ReadinessKind

ADDRESS = Address.parse("west/core/ConfigMap/apps/settings")
BODY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "apps"}}


class FlakyCluster:
    """Applies succeed after `apply_failures` transient errors; the GETs listed in `get_failures`
    (1-based call numbers) fail transiently, the others return the applied object."""

    name = "west"
    requests = 0

    def __init__(self, *, apply_failures: int = 0, get_failures: tuple[int, ...] = (),
                 retry_after: float | None = None) -> None:
        self.apply_failures, self.get_failures, self.retry_after = apply_failures, get_failures, retry_after
        self.applies = self.gets = 0

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None:
        return ResourceInfo("configmaps", True)

    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        self.applies += 1
        if self.applies <= self.apply_failures:
            raise TransientClusterError("cluster west: 429 slow down", retry_after=self.retry_after, status=429)
        return {**body, "metadata": {**body["metadata"], "uid": "u-1"}}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        if self.gets in self.get_failures:
            raise TransientClusterError("cluster west: connection failed: reset by peer")
        return {**BODY, "metadata": {**BODY["metadata"], "uid": "u-1"}}


def _executor(cluster: FlakyCluster, sleeps: list[float], timeout: float = 60.0) -> tuple[ClusterExecutor, Step]:
    step = Step(ADDRESS, Action.CREATE, "t", api_version="v1", body=BODY,
                readiness=Readiness(ReadinessKind.EXISTS, timeout_seconds=timeout))
    plan = Plan("demo", Mode.NORMAL, (step,), None, 0, "")
    return ClusterExecutor(plan, {"west": cluster}, sleep=sleeps.append, clock=lambda: 1000.0), step


def test_a_transient_read_during_the_wait_does_not_repeat_the_write() -> None:
    cluster = FlakyCluster(get_failures=(1,))
    sleeps: list[float] = []
    executor, step = _executor(cluster, sleeps)
    said: list[str] = []
    result = executor.execute(step, said.append)
    assert result.uid == "u-1"
    assert cluster.applies == 1 and cluster.gets == 2  # the wait read again; nothing was re-applied
    assert not any("retrying" in m for m in said) and sleeps == []


def test_a_failed_write_is_retried_and_retry_after_stops_at_the_deadline() -> None:
    cluster = FlakyCluster(apply_failures=2, retry_after=120)
    sleeps: list[float] = []
    executor, step = _executor(cluster, sleeps, timeout=5)
    said: list[str] = []
    assert executor.execute(step, said.append).uid == "u-1"
    assert cluster.applies == 3
    assert sleeps == [5.0, 5.0]  # Retry-After: 120 asked for more than the step's 5 s allow
    assert said[0].startswith("retrying in 5.0s after: cluster west: 429 slow down")


@pytest.mark.parametrize(("retry_after", "attempt", "remaining", "expected"), [
    (None, 1, 60.0, 0.5),
    (None, 3, 60.0, 2.0),
    (None, 12, 60.0, MAX_BACKOFF),
    (None, 12, 3.0, 3.0),
    (2.0, 1, 60.0, 2.0),  # the server's word is honoured...
    (120.0, 1, 60.0, 60.0),  # ...up to the deadline
    (1.0, 1, 0.0, None),  # no time left: give up
])
def test_one_retry_delay_rule(retry_after: float | None, attempt: int, remaining: float,
                              expected: float | None) -> None:
    err = TransientClusterError("x", retry_after=retry_after, status=429)
    assert retry_delay(err, attempt, remaining=remaining) == expected
