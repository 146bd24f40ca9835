"""SIMULATIONS of Antrea Multi-cluster's controllers, for the lab (the real images cannot run here).

`ControllerSimulation` stands in for `antrea-mc-controller` on one cluster (leader or member role):
it serves the upstream webhook paths at the Service's endpoint (through `lab.webhooks`), injects
the CA into the webhook configurations as the real controller does, and marks the leader's
ClusterSet Ready. Its MemberClusterAnnounce check is the one upstream added with per-member
tokens: the caller must be a ServiceAccount whose `multicluster.antrea.io/cluster-id` annotation
equals the announced `clusterID`, and the object must be named `member-announce-from-<id>`.

`MemberAgentSimulation` stands in for the member controller's leader connection. It acts with ONLY
what fleetplan delivered: it reads the member ClusterSet and the token Secret it names, then talks
to the leader with that bearer token and CA, creating and refreshing (`touch-ts`)
`member-announce-from-<id>` in the leader namespace, and reports the result as the member
ClusterSet's status (Ready / clusterStatuses). Its own cluster is read with the lab's admin
credentials, as the in-cluster controller reads its own cluster. When a ClusterSet disappears it
deletes its announce with the credentials it last held (what the real member does on leave).

Every line these write to their log, every event message and every object they touch says
"simulation", so no output can be mistaken for a real Antrea controller.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from fleetplan.errors import LabError
from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.rest import ApiError, LabRest
from fleetplan.lab.state import LabCluster
from fleetplan.lab.webhooks import (
    AdmissionDecision,
    ServiceServer,
    WebhookRequest,
    WebhookResponse,
    serve_service,
)

GROUP = "multicluster.crd.antrea.io"
CLUSTER_ID_ANNOTATION = "multicluster.antrea.io/cluster-id"
SIMULATED_BY = "fleetplan.dev/simulated-by"
SERVICE = "antrea-mc-webhook-service"
ANNOUNCE_PREFIX = "member-announce-from-"
Log = Callable[[str], None]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(status: bool, reason: str, message: str) -> dict[str, Any]:
    return {"type": "Ready", "status": "True" if status else "False", "reason": reason,
            "message": f"simulation: {message}", "lastTransitionTime": _now()}


class ControllerSimulation:
    """SIMULATION of antrea-mc-controller's webhooks and leader ClusterSet status on one cluster."""

    def __init__(self, cluster: LabCluster, namespace: str, role: str, log: Log = print) -> None:
        self.cluster, self.namespace, self.role = cluster, namespace, role
        self.api = admin_rest(cluster)
        self._log, self._prefix = log, f"simulation[antrea-mc-controller {role} {cluster.name}]"
        self.server: ServiceServer | None = None
        self.denied: list[str] = []
        self.announcers: dict[str, str] = {}  # announce name -> the user that last wrote it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._waiter: threading.Thread | None = None

    def log(self, message: str) -> None:
        self._log(f"{self._prefix}: {message}")

    def start(self, timeout: float = 120.0, interval: float = 1.0) -> ControllerSimulation:
        """Serve the webhooks once the Service has an endpoint (waiting up to `timeout`), then keep
        caBundle injected and the leader ClusterSet's status set, every `interval` seconds."""
        deadline = time.monotonic() + timeout
        path = f"/api/v1/namespaces/{self.namespace}/services/{SERVICE}"
        while self.api.request("GET", path)[0] != 200:  # fleetplan has not created it yet
            if time.monotonic() >= deadline or self._stop.wait(0.5):
                raise LabError(f"simulation: service {self.namespace}/{SERVICE} did not appear on "
                               f"{self.cluster.name} within {timeout:.0f}s")
        self.server = serve_service(self.cluster, self.namespace, SERVICE, self._handle,
                                    timeout=max(1.0, deadline - time.monotonic()))
        self.inject_ca_bundle()
        self.log(f"serving webhooks at {self.server.host}:{self.server.port}")
        self._thread = threading.Thread(target=self._maintain, args=(interval,), daemon=True,
                                        name=f"antrea-controller-sim-{self.cluster.name}")
        self._thread.start()
        return self

    def start_in_background(self, timeout: float = 600.0, interval: float = 1.0) -> ControllerSimulation:
        """`start` from a thread, so the caller can go on to create the Service (fleetplan's apply)."""

        def run() -> None:
            try:
                self.start(timeout, interval)
            except LabError as err:
                if not self._stop.is_set():
                    self.log(f"could not start: {err}")

        self._waiter = threading.Thread(target=run, daemon=True, name=f"antrea-controller-wait-{self.cluster.name}")
        self._waiter.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._waiter, self._thread):
            if thread is not None:
                thread.join(10)
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _maintain(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.inject_ca_bundle()
                if self.role == "leader":
                    self.mark_leader_ready()
            except (ApiError, OSError, http.client.HTTPException) as err:
                self.log(f"sync failed: {err}")

    def inject_ca_bundle(self) -> None:
        """Set caBundle on every webhook that names this Service (the controller's own job)."""
        assert self.server is not None
        bundle = self.server.ca_bundle_b64
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
            for config in self.api.get(path).get("items", []):
                changed = False
                for hook in config.get("webhooks") or []:
                    svc = (hook.get("clientConfig") or {}).get("service") or {}
                    if (svc.get("namespace"), svc.get("name")) == (self.namespace, SERVICE) and \
                            hook["clientConfig"].get("caBundle") != bundle:
                        hook["clientConfig"]["caBundle"] = bundle
                        changed = True
                if changed:
                    status, raw = self.api.request("PUT", f"{path}/{config['metadata']['name']}", config)
                    if status not in (200, 404, 409):  # gone or changed meanwhile: next round
                        raise ApiError(status, "PUT", f"{path}/{config['metadata']['name']}",
                                       raw.decode(errors="replace"))

    def _handle(self, req: WebhookRequest) -> WebhookResponse:
        review = req.json() or {}
        request = review.get("request") or {}
        decision = self.decide(req.path, request)
        if not decision.allowed:
            self.denied.append(decision.message)
            self.log(f"denied {request.get('operation')} {req.path}: {decision.message}")
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": decision.allowed}
        if decision.message:
            response["status"] = {"message": decision.message, "code": 200 if decision.allowed else 403}
        return WebhookResponse(body={"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                                     "kind": "AdmissionReview", "response": response})

    def decide(self, path: str, request: dict[str, Any]) -> AdmissionDecision:
        if "clusterset" in path:
            return self._clusterset(request)
        if "memberclusterannounce" in path:
            return self._announce(request)
        return AdmissionDecision(True)

    def _clusterset(self, request: dict[str, Any]) -> AdmissionDecision:
        if request.get("operation") == "DELETE":
            return AdmissionDecision(True)
        obj = request.get("object") or {}
        spec = obj.get("spec") or {}
        if not spec.get("clusterID"):
            return AdmissionDecision(False, "simulation: spec.clusterID is required")
        if len(spec.get("leaders") or []) != 1:
            return AdmissionDecision(False, "simulation: exactly one leader is required")
        old = request.get("oldObject") or {}
        if old and (old.get("spec") or {}).get("clusterID") != spec.get("clusterID"):
            return AdmissionDecision(False, "simulation: spec.clusterID cannot be changed")
        return AdmissionDecision(True)

    def _announce(self, request: dict[str, Any]) -> AdmissionDecision:
        user = (request.get("userInfo") or {}).get("username", "")
        obj = request.get("object") or request.get("oldObject") or {}
        cluster_id = obj.get("clusterID", "")
        if request.get("operation") == "DELETE" and not user.startswith("system:serviceaccount:"):
            return AdmissionDecision(True)  # an administrator cleaning up
        if obj.get("metadata", {}).get("name") != ANNOUNCE_PREFIX + cluster_id:
            return AdmissionDecision(False, f"simulation: the announce for {cluster_id!r} must be named "
                                            f"{ANNOUNCE_PREFIX}{cluster_id}")
        parts = user.split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            return AdmissionDecision(False, f"simulation: {user!r} is not a member ServiceAccount")
        try:
            account = self.api.get(f"/api/v1/namespaces/{parts[2]}/serviceaccounts/{parts[3]}")
        except ApiError:
            return AdmissionDecision(False, f"simulation: ServiceAccount {parts[2]}/{parts[3]} not found")
        bound = (account["metadata"].get("annotations") or {}).get(CLUSTER_ID_ANNOTATION)
        if bound != cluster_id:
            return AdmissionDecision(False, f"simulation: ServiceAccount {parts[3]} is bound to cluster ID "
                                            f"{bound!r}, not {cluster_id!r}")
        self.announcers[ANNOUNCE_PREFIX + cluster_id] = user
        return AdmissionDecision(True)

    def mark_leader_ready(self) -> int:
        """Set Ready on every leader ClusterSet in the namespace; returns how many were updated."""
        base = f"/apis/{GROUP}/v1alpha2/namespaces/{self.namespace}/clustersets"
        status, raw = self.api.request("GET", base)
        if status == 404:
            return 0  # the CRD is not there (yet, or any more)
        count = 0
        for cs in json.loads(raw).get("items", []):
            generation = cs["metadata"].get("generation", 1)
            current = cs.get("status") or {}
            if current.get("observedGeneration") == generation and any(
                    c.get("type") == "Ready" and c.get("status") == "True" for c in current.get("conditions") or []):
                continue  # as the controller does: write status only when it changes
            cs["status"] = {"conditions": [_ready(True, "LeaderReady", "leader ClusterSet ready")],
                            "observedGeneration": generation}
            if self.api.request("PUT", f"{base}/{cs['metadata']['name']}/status", cs)[0] == 200:
                count += 1
        return count


class BearerRest(LabRest):
    """JSON requests with a bearer token and a CA given as PEM text: the member's delivered credentials."""

    def __init__(self, server: str, token: str, ca_pem: str, timeout: float = 15.0) -> None:
        url = urlsplit(server)
        self.host, self.port, self.timeout = url.hostname or "", url.port or 443, timeout
        self._ctx = ssl.create_default_context(cadata=ca_pem)
        self._token = token

    def request(self, method: str, path: str, body: object | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self._ctx, timeout=self.timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json", "Authorization": f"Bearer {self._token}"}
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@dataclass
class _Joined:
    leader: BearerRest
    namespace: str
    name: str


class MemberAgentSimulation:
    """SIMULATION of a member controller's leader connection, using only delivered credentials."""

    def __init__(self, member: LabCluster, namespace: str = "kube-system", log: Log = print) -> None:
        self.member, self.namespace = member, namespace
        self.api = admin_rest(member)
        self._log, self._prefix = log, f"simulation[antrea member agent {member.name}]"
        self.joined: dict[str, _Joined] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def log(self, message: str) -> None:
        self._log(f"{self._prefix}: {message}")

    def credentials(self, cluster_set: dict[str, Any]) -> BearerRest:
        """The leader client built from the member ClusterSet and the token Secret it names."""
        leader = cluster_set["spec"]["leaders"][0]
        secret = self.api.get(f"/api/v1/namespaces/{self.namespace}/secrets/{leader['secret']}")
        data = secret.get("data") or {}
        token = base64.b64decode(data["token"]).decode()
        ca = base64.b64decode(data["ca.crt"]).decode()
        return BearerRest(leader["server"], token, ca)

    def sync_once(self) -> None:
        base = f"/apis/{GROUP}/v1alpha2/namespaces/{self.namespace}/clustersets"
        status, raw = self.api.request("GET", base)
        if status == 404:  # the member bundle (its CRDs) is not installed (yet, or any more)
            items: list[dict[str, Any]] = []
        elif status != 200:
            raise ApiError(status, "GET", base, raw.decode(errors="replace"))
        else:
            items = json.loads(raw).get("items", [])
        present = {cs["metadata"]["name"]: cs for cs in items}
        for name in list(self.joined):
            if name not in present:
                self._leave(name)
        for name, cs in present.items():
            ok, message = self._announce(cs)
            leader_id = cs["spec"]["leaders"][0]["clusterID"]
            condition = _ready(ok, "Connected" if ok else "ConnectFailed", message)
            cs["status"] = {"conditions": [condition], "totalClusters": 1, "readyClusters": int(ok),
                            "observedGeneration": cs["metadata"].get("generation", 1),
                            "clusterStatuses": [{"clusterID": leader_id, "conditions": [
                                dict(condition), {"type": "IsLeader", "status": "True",
                                                  "lastTransitionTime": _now()}]}]}
            try:
                self.api.call("PUT", f"{base}/{name}/status", cs)
            except ApiError as err:
                if err.status != 409:  # a concurrent spec update; the next round writes it
                    raise

    def _announce(self, cs: dict[str, Any]) -> tuple[bool, str]:
        spec = cs["spec"]
        cluster_id, leader_ns = spec["clusterID"], spec["namespace"]
        name = ANNOUNCE_PREFIX + cluster_id
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{leader_ns}/memberclusterannounces"
        try:
            leader = self.credentials(cs)
            status, raw = leader.request("GET", f"{path}/{name}")
            body: dict[str, Any] = json.loads(raw) if status == 200 else {
                "apiVersion": f"{GROUP}/v1alpha1", "kind": "MemberClusterAnnounce",
                "metadata": {"name": name, "namespace": leader_ns}}
            body.update({"clusterID": cluster_id, "clusterSetID": cs["metadata"]["name"],
                         "leaderClusterID": spec["leaders"][0]["clusterID"]})
            body["metadata"].setdefault("annotations", {}).update(
                {"touch-ts": _now(), SIMULATED_BY: "antrea-member-agent-simulation"})
            if status == 200:
                leader.call("PUT", f"{path}/{name}", body)
            else:
                leader.call("POST", path, body)
        except (ApiError, OSError, KeyError, ValueError, ssl.SSLError, http.client.HTTPException) as err:
            message = f"announce to the leader failed: {str(err)[:300]}"
            self.errors.append(message)
            self.log(message)
            return False, message
        self.joined[cs["metadata"]["name"]] = _Joined(leader, leader_ns, name)
        return True, f"announced {name} to leader {spec['leaders'][0]['clusterID']}"

    def _leave(self, cluster_set: str) -> None:
        joined = self.joined.pop(cluster_set)
        path = f"/apis/{GROUP}/v1alpha1/namespaces/{joined.namespace}/memberclusterannounces/{joined.name}"
        try:
            status, _ = joined.leader.request("DELETE", path)
            self.log(f"left {cluster_set}: DELETE {joined.name} answered {status}")
        except (OSError, ssl.SSLError, http.client.HTTPException) as err:
            self.log(f"left {cluster_set}, but could not delete {joined.name}: {err}")

    def start(self, interval: float = 1.0) -> MemberAgentSimulation:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.sync_once()
                except (ApiError, OSError, http.client.HTTPException) as err:
                    self.log(f"sync failed: {err}")
                self._stop.wait(interval)

        self._thread = threading.Thread(target=loop, name=f"antrea-member-sim-{self.member.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()
