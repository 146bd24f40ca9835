"""A leader and a member in the lab, rendered by the Antrea stack from the genuine v2.7.0 bundles.

The objects are applied here with a minimal server-side-apply loop (the engine's own apply is
exercised by the engine's tests); what this checks is the stack's output against real API
servers: the controller SIMULATION serves the upstream webhooks, and the member agent
SIMULATION, holding only the token Secret the stack wrote into its member, announces itself to
the leader under the real RBAC of `antrea-mc-member-cluster-role`.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetplan.config import Fleet
from fleetplan.errors import LabError
from fleetplan.graph.building import build_graph
from fleetplan.lab import Lab
from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.rest import LabRest
from fleetplan.lab.simulators.antrea import (
    ControllerSimulation,
    MemberAgentSimulation,
    wait_until,
)
from fleetplan.stacks.antrea import desired_fleet
from fleetplan.stacks.bundles import ENV_MIRROR, BundleSource
from fleetplan.stacks.desired import DesiredResource, Handler, Ref

pytestmark = pytest.mark.integration
MIRROR = Path(os.environ.get(ENV_MIRROR) or Path(__file__).resolve().parents[4] / "shared" / "upstream")
MCA = "/apis/multicluster.crd.antrea.io/v1alpha1/namespaces/{ns}/memberclusterannounces"


def url(body: dict[str, Any], name: bool = True) -> str:
    api = body["apiVersion"]
    base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    ns = body["metadata"].get("namespace")
    path = f"{base}/namespaces/{ns}" if ns else base
    path += "/" + body["kind"].lower() + "s"
    return f"{path}/{body['metadata']['name']}" if name else path


def resolve(value: Any, outputs: dict[str, dict[str, str]]) -> Any:
    if isinstance(value, Ref):
        out = outputs[str(value.source)][value.output]
        return base64.b64encode(out.encode()).decode() if value.transform == "base64" else out
    if isinstance(value, dict):
        return {k: resolve(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, outputs) for v in value]
    return value


class MiniApply:
    """Server-side apply in graph order; bound tokens minted with TokenRequest."""

    def __init__(self, lab: Lab, names: dict[str, str]) -> None:
        self.apis = {fleet: admin_rest(lab[real]) for fleet, real in names.items()}
        self.lab, self.names = lab, names
        self.outputs: dict[str, dict[str, str]] = {}
        self.applied: list[tuple[LabRest, dict[str, Any]]] = []

    def apply(self, resource: DesiredResource) -> None:
        api = self.apis[resource.address.cluster]
        if resource.handler == Handler.BOUND_TOKEN:
            account = resource.options["serviceAccount"]
            answer = api.call("POST", f"/api/v1/namespaces/{resource.address.namespace}/serviceaccounts/"
                                      f"{account}/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": resource.options["ttlSeconds"]}})
            ca = Path(self.lab[self.names[resource.address.cluster]].ca).read_text()
            self.outputs[str(resource.address)] = {"token": answer["status"]["token"], "ca.crt": ca}
            return
        body = resolve(dict(resource.body), self.outputs)
        status, data = api.request("PATCH", url(body) + "?fieldManager=fleetplan-it&force=true", body,
                                   "application/apply-patch+yaml")
        assert status < 300, f"{resource.address}: HTTP {status} {data[:300]!r}"
        self.applied.append((api, body))
        if body["kind"] == "CustomResourceDefinition":
            assert wait_until(lambda: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (api.get(url(body)).get("status") or {}).get("conditions") or []), 60)


@pytest.fixture
def joined(lab: Lab, tmp_path: Path) -> Iterator[dict[str, Any]]:
    leader, member = lab.clusters[0], lab.clusters[1]
    suffix = uuid.uuid4().hex[:5]
    ns = f"mc-{suffix}"
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "it"},
           "spec": {"stack": "antrea", "version": "v2.7.0", "clusterSet": {"name": f"set-{suffix}",
                                                                            "namespace": ns},
                    "leader": {"name": leader.name, "apiServer": leader.server},
                    "members": [{"name": member.name, "apiServer": member.server}]}}
    fleet = Fleet.model_validate(doc, context={"base_dir": str(tmp_path)})
    desired = desired_fleet(fleet, bundles=BundleSource(mirror=MIRROR, cache_dir=tmp_path / "cache"))
    by = desired.by_address()
    runner = MiniApply(lab, {leader.name: leader.name, member.name: member.name})
    sims: dict[str, ControllerSimulation] = {}
    logs: list[str] = []
    agent = MemberAgentSimulation(member, "kube-system", log=logs.append)
    try:
        for address in build_graph(desired.resources).creation_order():
            if address.kind == "ClusterSet" and address.cluster not in sims:
                cluster = lab[address.cluster]
                role = "leader" if cluster is leader else "member"
                try:
                    sims[address.cluster] = ControllerSimulation(cluster, address.namespace, role,
                                                                 log=logs.append).start(timeout=30)
                except LabError as err:
                    # Known lab gap: the upstream controller is hostNetwork, so its endpoint would
                    # be the cluster's 127.0.<i>.1, which EndpointSlice validation refuses.
                    pytest.xfail(f"lab cannot route the webhook Service yet: {err}")
            runner.apply(by[address])
        agent.start(interval=0.5)
        yield {"leader": leader, "member": member, "ns": ns, "agent": agent, "sims": sims,
               "set": f"set-{suffix}", "logs": logs, "runner": runner,
               "token": runner.outputs[f"{leader.name}/fleetplan.dev/BoundToken/{ns}/"
                                       f"member-{member.name}-token"]}
    finally:
        agent.stop()
        for api, body in reversed(runner.applied):
            if body["kind"] == "ClusterSet":
                api.request("DELETE", url(body))
        for sim in sims.values():
            sim.stop()
        for api, body in reversed(runner.applied):  # leave the shared lab as it was
            if body["kind"] != "ClusterSet":
                api.request("DELETE", url(body))


def test_member_announces_with_only_the_delivered_token(joined: dict[str, Any]) -> None:
    leader, member, ns = joined["leader"], joined["member"], joined["ns"]
    leader_api, member_api = admin_rest(leader), admin_rest(member)
    cs_path = f"/apis/multicluster.crd.antrea.io/v1alpha2/namespaces/kube-system/clustersets/{joined['set']}"

    def member_ready() -> bool:
        conditions = (member_api.get(cs_path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    assert wait_until(member_ready, 30), joined["logs"]
    announce = leader_api.get(MCA.format(ns=ns) + f"/member-announce-from-{member.name}")
    assert announce["clusterID"] == member.name and announce["leaderClusterID"] == leader.name
    first = announce["metadata"]["annotations"]["touch-ts"]
    assert announce["metadata"]["annotations"]["fleetplan.dev/simulated-by"].endswith("simulation")
    assert wait_until(lambda: leader_api.get(MCA.format(ns=ns) + f"/member-announce-from-{member.name}")
                      ["metadata"]["annotations"]["touch-ts"] != first, 5)
    account = leader_api.get(f"/api/v1/namespaces/{ns}/serviceaccounts/member-{member.name}-token")
    assert account["metadata"]["annotations"]["multicluster.antrea.io/cluster-id"] == member.name


def test_delivered_token_is_confined_by_rbac_and_the_webhook(joined: dict[str, Any]) -> None:
    leader, member, ns = joined["leader"], joined["member"], joined["ns"]
    secret = admin_rest(member).get(f"/api/v1/namespaces/kube-system/secrets/member-{member.name}-token")
    assert base64.b64decode(secret["data"]["namespace"]).decode() == ns
    from fleetplan.lab.simulators.antrea import BearerRest

    as_member = BearerRest(leader.server, base64.b64decode(secret["data"]["token"]).decode(),
                           base64.b64decode(secret["data"]["ca.crt"]).decode())
    status, _ = as_member.request("GET", f"/api/v1/namespaces/{ns}/secrets")
    assert status == 403
    status, _ = as_member.request("GET", f"/api/v1/namespaces/{ns}/secrets/member-{member.name}-token")
    assert status == 403
    spoof = {"apiVersion": "multicluster.crd.antrea.io/v1alpha1", "kind": "MemberClusterAnnounce",
             "metadata": {"name": "member-announce-from-other"}, "clusterID": "other",
             "clusterSetID": joined["set"], "leaderClusterID": leader.name}
    status, _ = as_member.request("POST", MCA.format(ns="default"), spoof)
    assert status == 403  # RBAC: no writes outside the leader namespace
    status, data = as_member.request("POST", MCA.format(ns=ns), spoof)
    assert status >= 400 and b"bound to cluster ID" in data, data  # the webhook: no spoofing
    assert any("denied" in line and line.startswith("simulation[") for line in joined["logs"])
    assert json.loads(data)["status"] == "Failure"


def test_leaving_removes_the_announce(joined: dict[str, Any]) -> None:
    leader, member, ns = joined["leader"], joined["member"], joined["ns"]
    name = f"member-announce-from-{member.name}"
    leader_api = admin_rest(leader)
    assert wait_until(lambda: leader_api.request("GET", MCA.format(ns=ns) + f"/{name}")[0] == 200, 30)
    cs = f"/apis/multicluster.crd.antrea.io/v1alpha2/namespaces/kube-system/clustersets/{joined['set']}"
    status, _ = admin_rest(member).request("DELETE", cs)
    assert status == 200
    assert wait_until(lambda: leader_api.request("GET", MCA.format(ns=ns) + f"/{name}")[0] == 404, 15)
    time.sleep(1)
