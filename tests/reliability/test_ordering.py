"""Ordering found by the reliability runs: a workload must wait for the ServiceAccount its pods
run as. Created first, its pods are refused ("serviceaccount not found") and the ReplicaSet
controller backs off exponentially, past the readiness timeout on a loaded machine (seen on the
Antrea leader's antrea-mc-controller). Pure graph check, no cluster."""

from __future__ import annotations

import pytest

from fleetplan.addrs import Address
from fleetplan.graph.building import build_graph
from fleetplan.stacks.desired import DesiredResource


def _pod_template(account: str) -> dict[str, object]:
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"serviceAccountName": account, "containers": []}}


@pytest.mark.parametrize("kind,group,spec", [
    ("Deployment", "apps", {"template": _pod_template("robot")}),
    ("DaemonSet", "apps", {"template": _pod_template("robot")}),
    ("StatefulSet", "apps", {"template": _pod_template("robot")}),
    ("Job", "batch", {"template": _pod_template("robot")}),
    ("CronJob", "batch", {"jobTemplate": {"spec": {"template": _pod_template("robot")}}}),
])
def test_workloads_wait_for_their_service_account(kind: str, group: str, spec: dict[str, object]) -> None:
    account = Address("c1", "", "ServiceAccount", "ns", "robot")
    other = Address("c1", "", "ServiceAccount", "ns", "someone-else")
    workload = Address("c1", group, kind, "ns", "w")
    version = f"{group}/v1" if group else "v1"
    graph = build_graph([
        DesiredResource(account, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
        DesiredResource(other, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "someone-else"}}),
        DesiredResource(workload, {"apiVersion": version, "kind": kind, "metadata": {"name": "w"}, "spec": spec}),
    ])
    assert account in graph.dependencies(workload)
    assert other not in graph.dependencies(workload)
    order = graph.creation_order()
    assert order.index(account) < order.index(workload)
