"""Readiness judged from one read: a Deployment is available only when its rollout is complete
(the rules of `kubectl rollout status`)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetplan.live.readiness import check
from fleetplan.stacks.desired import Readiness, ReadinessKind

AVAILABLE = Readiness(ReadinessKind.AVAILABLE)


def _deployment(status: dict[str, Any], *, replicas: int = 2, generation: int = 3) -> dict[str, Any]:
    return {"metadata": {"name": "web", "generation": generation}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": 3, **status}}


@pytest.mark.parametrize(("status", "awaited"), [
    # Old pods still serve: 2 new ones are available, but one of the old ReplicaSet is still there.
    ({"replicas": 3, "updatedReplicas": 2, "availableReplicas": 3}, "1 old replica(s) to terminate"),
    ({"replicas": 2, "updatedReplicas": 1, "availableReplicas": 2}, "1 of 2 replicas updated"),
    ({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}, "1 of 2 updated replicas available"),
    ({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2},
     "the controller to observe the new generation"),
    ({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "stuck"}]},
     "a rollout past its progress deadline (stuck)"),
])
def test_a_deployment_mid_rollout_is_not_available(status: dict[str, Any], awaited: str) -> None:
    assert check(None, _deployment(status), AVAILABLE) == (False, awaited)  # type: ignore[arg-type]


def test_a_completed_rollout_is_available() -> None:
    done = _deployment({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2})
    assert check(None, done, AVAILABLE) == (True, "")  # type: ignore[arg-type]
    scaled_to_zero = _deployment({}, replicas=0)  # zero counters are omitted from status
    assert check(None, scaled_to_zero, AVAILABLE) == (True, "")  # type: ignore[arg-type]
