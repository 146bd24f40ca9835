"""`KubeCluster` against the lab's real API servers: answers that look like races but are final."""

from __future__ import annotations

from typing import Any

import pytest

from fleetplan.addrs import Address
from fleetplan.live.clusters import KubeCluster, UidMismatchError
from fleetplan.live.handlers import ApplyHandler, Work
from fleetplan.live.kubeconfigs import ClusterAccess

pytestmark = pytest.mark.integration


def _config_map(namespace: str, value: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
            "data": {"owner": value}}


def test_a_delete_of_an_object_recreated_by_someone_else_is_not_retried(lab: Any, lab_namespace: Any) -> None:
    target = lab.clusters[0]
    namespace = lab_namespace(target)
    cluster = KubeCluster(ClusterAccess(target.name, target.kubeconfig, target.context))
    ours = cluster.apply(_config_map(namespace, "fleetplan"))["metadata"]["uid"]
    assert cluster.delete("v1", "ConfigMap", namespace, "settings", uid=ours)
    theirs = cluster.apply(_config_map(namespace, "someone else"))["metadata"]["uid"]

    before = cluster.requests
    with pytest.raises(UidMismatchError, match="re-created outside fleetplan"):
        cluster.delete("v1", "ConfigMap", namespace, "settings", uid=ours)
    assert cluster.requests - before == 1  # answered once, never retried

    said: list[str] = []
    address = Address("c", "", "ConfigMap", namespace, "settings")
    ApplyHandler().remove(cluster, Work(address, "v1", None, timeout=5, live_uid=ours), said.append)
    assert any(m.startswith("warning:") and "re-created outside fleetplan" in m for m in said), said
    left = cluster.get("v1", "ConfigMap", namespace, "settings")
    assert left is not None and left["metadata"]["uid"] == theirs
