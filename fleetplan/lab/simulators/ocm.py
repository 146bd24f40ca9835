"""SIMULATIONS of Open Cluster Management's hub operator and registration agent, for the lab (the
real images cannot run here).

`HubOperatorSimulation` stands in for the cluster-manager operator and the hub registration
controller: once a `ClusterManager` exists it installs the hub CRDs (ManagedCluster,
ManagedClusterSet, ManagedClusterSetBinding, ManifestWork) from the genuine upstream bundle in the
mirror and reports `Applied`; for each ManagedCluster with `hubAcceptsClient: true` it creates the
cluster's namespace and the RBAC the real controller grants the cluster's agent group, and sets
`HubAcceptedManagedCluster`.

`RegistrationAgentSimulation` stands in for a spoke's klusterlet registration agent. It acts with
ONLY what fleetplan delivered: it reads the Klusterlet and Secret `bootstrap-hub-kubeconfig` on its
spoke, authenticates to the hub with that kubeconfig's token and CA (TLS verified), creates its
ManagedCluster and a CSR as the real agent does (label, subject, signer), and once the CSR is
approved and signed it switches to the signed certificate: it stores it in
`hub-kubeconfig-secret`, sets `ManagedClusterJoined` through the hub's status subresource with that
certificate (so the hub's RBAC for the agent is exercised), and reports `HubConnectionDegraded=False`
on the Klusterlet. Its own spoke is read with the lab's admin credentials, as the in-cluster agent
reads its own cluster.

Every log line, condition message and object these touch says "simulation".
"""

from __future__ import annotations

import base64
import json
import os
import threading
import uuid
from typing import Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.simulators.ocm_rest import (
    CredentialRest,
    Log,
    make_condition,
    merge_patch,
    run_loop,
    with_condition,
)
from fleetplan.lab.state import LabCluster
from fleetplan.stacks.bundles import BundleSource, load_bundle
from fleetplan.stacks.ocm_layout import LAYOUT

SIMULATED_BY = "fleetplan.dev/simulated-by"
CLUSTERS = "/apis/cluster.open-cluster-management.io/v1/managedclusters"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
OPERATOR = "/apis/operator.open-cluster-management.io/v1"
AGENT_NS = "open-cluster-management-agent"
__all__ = ["AGENT_NS", "CredentialRest", "HubOperatorSimulation", "RegistrationAgentSimulation"]


class _Looping:
    """The background loop both simulations run: `sync_once` every `interval` until stopped."""

    _prefix: str

    def sync_once(self) -> None:
        raise NotImplementedError

    def log(self, message: str) -> None:
        raise NotImplementedError

    def start(self, interval: float = 0.5) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=run_loop, args=(self.sync_once, self._stop, interval, self.log), daemon=True, name=self._prefix
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class HubOperatorSimulation(_Looping):
    """SIMULATION of the cluster-manager operator and hub registration controller on the hub."""

    def __init__(
        self, hub: LabCluster, version: str, mirror: str | os.PathLike[str] | None = None, log: Log = print
    ) -> None:
        self.hub, self.version, self.api = hub, version, admin_rest(hub)
        self.source = BundleSource.from_environment(mirror)
        self._log, self._prefix = log, f"simulation[ocm cluster-manager {hub.name}]"
        self._installed = False
        self._accepted: set[str] = set()

    def log(self, message: str) -> None:
        self._log(f"{self._prefix}: {message}")

    def sync_once(self) -> None:
        status, data = self.api.request("GET", f"{OPERATOR}/clustermanagers/cluster-manager")
        if status != 200:
            self._installed = False
            return
        manager = json.loads(data)
        if not self._installed:
            for crd in load_bundle(LAYOUT, self.version, "hub-crds", self.source).fresh_objects():
                crd["metadata"].setdefault("annotations", {})[SIMULATED_BY] = "ocm hub operator simulation"
                path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
                self.api.request(
                    "PATCH",
                    path + "?fieldManager=ocm-simulation&force=true",
                    crd,
                    content_type="application/apply-patch+yaml",
                )
            self.api.ensure(
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": "open-cluster-management-hub",
                        "annotations": {SIMULATED_BY: "ocm hub operator"},
                    },
                },
            )
            self._installed = True
            self.log("installed the hub CRDs from the mirror")
        if not any(
            c.get("type") == "Applied" and c.get("status") == "True"
            for c in (manager.get("status") or {}).get("conditions") or []
        ):
            applied = make_condition("Applied", True, "ClusterManagerApplied", "hub components applied")
            merge_patch(
                self.api,
                f"{OPERATOR}/clustermanagers/cluster-manager/status",
                {"status": {"conditions": with_condition(manager, applied)}},
            )
            self.log("ClusterManager Applied")
        status, data = self.api.request("GET", CLUSTERS)
        for cluster in json.loads(data).get("items", []) if status == 200 else []:
            if (cluster.get("spec") or {}).get("hubAcceptsClient") is True:
                self._accept(cluster)

    def _accept(self, cluster: dict[str, Any]) -> None:
        name = cluster["metadata"]["name"]
        group = f"system:open-cluster-management:{name}"
        role = f"open-cluster-management:managedcluster:{name}"
        note = {SIMULATED_BY: "ocm hub registration controller"}
        self.api.ensure(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": note}},
        )
        rules = [
            {
                "apiGroups": ["cluster.open-cluster-management.io"],
                "resources": ["managedclusters"],
                "resourceNames": [name],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": ["cluster.open-cluster-management.io"],
                "resources": ["managedclusters/status"],
                "resourceNames": [name],
                "verbs": ["patch", "update"],
            },
        ]
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.api.ensure(
            f"{rbac}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role, "annotations": note},
                "rules": rules,
            },
        )
        self.api.ensure(
            f"{rbac}/clusterrolebindings",
            {
                "metadata": {"name": role, "annotations": note},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
            },
        )
        if not any(
            c.get("type") == "HubAcceptedManagedCluster"
            for c in (cluster.get("status") or {}).get("conditions") or []
        ):
            accepted = make_condition(
                "HubAcceptedManagedCluster", True, "HubClusterAdminAccepted", "accepted by hub cluster admin"
            )
            merge_patch(
                self.api,
                f"{CLUSTERS}/{name}/status",
                {"status": {"conditions": with_condition(cluster, accepted)}},
            )
        if name not in self._accepted:
            self._accepted.add(name)
            self.log(f"ManagedCluster {name} accepted: namespace and agent RBAC created")



class RegistrationAgentSimulation(_Looping):
    """SIMULATION of a spoke's registration agent, using only the delivered bootstrap kubeconfig."""

    def __init__(self, spoke: LabCluster, agent: str = "simagent", log: Log = print) -> None:
        self.spoke, self.agent, self.api = spoke, agent, admin_rest(spoke)
        self._log, self._prefix = log, f"simulation[ocm registration agent {spoke.name}]"
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._csr: str | None = None
        self.hub_identity: dict[str, Any] | None = None  # who the signed certificate is on the hub

    def log(self, message: str) -> None:
        self._log(f"{self._prefix}: {message}")

    def _klusterlet(self) -> dict[str, Any] | None:
        status, data = self.api.request("GET", f"{OPERATOR}/klusterlets/klusterlet")
        return json.loads(data) if status == 200 else None

    def _secret(self, name: str) -> dict[str, str] | None:
        status, data = self.api.request("GET", f"/api/v1/namespaces/{AGENT_NS}/secrets/{name}")
        if status != 200:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (json.loads(data).get("data") or {}).items()}

    def sync_once(self) -> None:
        klusterlet = self._klusterlet()
        bootstrap = self._secret("bootstrap-hub-kubeconfig") if klusterlet else None
        if klusterlet is None or bootstrap is None or "kubeconfig" not in bootstrap:
            self._csr = None
            return
        name = klusterlet["spec"]["clusterName"]
        signed = self._secret("hub-kubeconfig-secret")
        boot = CredentialRest.from_kubeconfig(bootstrap["kubeconfig"])
        if signed and "tls.crt" in signed:
            self._joined(klusterlet, boot, name, signed)
            return
        status, _ = boot.request("GET", f"{CLUSTERS}/{name}")
        if status == 404:
            urls = [{"url": u["url"]} for u in klusterlet["spec"].get("externalServerURLs") or []]
            boot.call(
                "POST",
                CLUSTERS,
                {
                    "apiVersion": "cluster.open-cluster-management.io/v1",
                    "kind": "ManagedCluster",
                    "metadata": {
                        "name": name,
                        "annotations": {SIMULATED_BY: "ocm registration agent simulation"},
                    },
                    "spec": {"hubAcceptsClient": False, "managedClusterClientConfigs": urls},
                },
            )
            self.log(f"created ManagedCluster {name} with the bootstrap token")
        elif status != 200:
            self._report(
                klusterlet, True, "BootstrapSecretError", f"the hub answered {status} to the bootstrap token"
            )
            return
        if self._csr is None:
            self._csr = self._create_csr(boot, name)
        status, data = boot.request("GET", f"{CSRS}/{self._csr}")
        certificate = (json.loads(data).get("status") or {}).get("certificate") if status == 200 else None
        if certificate:
            self._store(klusterlet, boot, name, base64.b64decode(certificate))
        else:
            self._report(
                klusterlet, True, "BootstrapSecretFunctional", f"waiting for CSR {self._csr} approval"
            )

    def _create_csr(self, boot: CredentialRest, name: str) -> str:
        group = f"system:open-cluster-management:{name}"
        request = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
                        x509.NameAttribute(NameOID.COMMON_NAME, f"{group}:{self.agent}"),
                    ]
                )
            )
            .sign(self._key, hashes.SHA256())
        )
        csr_name = f"{name}-{uuid.uuid4().hex[:6]}"
        boot.call(
            "POST",
            CSRS,
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest",
                "metadata": {
                    "name": csr_name,
                    "labels": {
                        "open-cluster-management.io/cluster-name": name,
                        "open-cluster-management.io/agent-name": self.agent,
                    },
                    "annotations": {SIMULATED_BY: "ocm registration agent simulation"},
                },
                "spec": {
                    "request": base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
                    "signerName": "kubernetes.io/kube-apiserver-client",
                    "expirationSeconds": 3600,
                    "usages": ["digital signature", "key encipherment", "client auth"],
                },
            },
        )
        self.log(f"created CSR {csr_name} for cluster {name} with the bootstrap token")
        return csr_name

    def _store(self, klusterlet: dict[str, Any], boot: CredentialRest, name: str, cert: bytes) -> None:
        key = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        data = {
            "tls.crt": cert,
            "tls.key": key,
            "cluster-name": name.encode(),
            "agent-name": self.agent.encode(),
        }
        self.api.ensure(
            f"/api/v1/namespaces/{AGENT_NS}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "hub-kubeconfig-secret",
                    "annotations": {SIMULATED_BY: "ocm registration agent"},
                },
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            },
        )
        self.log(f"stored the signed certificate for cluster {name} in {AGENT_NS}/hub-kubeconfig-secret")

    def _joined(
        self, klusterlet: dict[str, Any], boot: CredentialRest, name: str, signed: dict[str, str]
    ) -> None:
        hub = CredentialRest(
            boot.server, boot.ca_pem, cert_pem=signed["tls.crt"].encode(), key_pem=signed["tls.key"].encode()
        )
        status, data = hub.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        if status >= 300:
            self._report(
                klusterlet, True, "HubKubeConfigError", f"the signed certificate was refused: {status}"
            )
            return
        self.hub_identity = json.loads(data).get("status", {}).get("userInfo")
        status, data = hub.request("GET", f"{CLUSTERS}/{name}")
        if status != 200:
            # As the real agent does: a hub kubeconfig that no longer works (the cluster was
            # removed from the hub) is dropped, and the agent bootstraps again.
            self.api.request("DELETE", f"/api/v1/namespaces/{AGENT_NS}/secrets/hub-kubeconfig-secret")
            self._csr, self.hub_identity = None, None
            self._report(
                klusterlet, True, "HubKubeConfigUnauthorized", f"cannot read ManagedCluster: {status}"
            )
            self.log(f"the signed certificate no longer works for {name} ({status}); bootstrapping again")
            return
        cluster = json.loads(data)
        if not any(
            c.get("type") == "ManagedClusterJoined" and c.get("status") == "True"
            for c in (cluster.get("status") or {}).get("conditions") or []
        ):
            joined = make_condition(
                "ManagedClusterJoined", True, "ManagedClusterJoined", "joined with a signed certificate"
            )
            merge_patch(
                hub, f"{CLUSTERS}/{name}/status", {"status": {"conditions": with_condition(cluster, joined)}}
            )
            who = (self.hub_identity or {}).get("username", "?")
            self.log(f"ManagedCluster {name} joined, as {who}")
        self._report(
            klusterlet, False, "HubConnectionFunctional", "connected to the hub with a signed certificate"
        )

    def _report(self, klusterlet: dict[str, Any], degraded: bool, reason: str, message: str) -> None:
        condition = make_condition("HubConnectionDegraded", degraded, reason, message)
        current = [
            c
            for c in (klusterlet.get("status") or {}).get("conditions") or []
            if c.get("type") == "HubConnectionDegraded"
        ]
        if current and current[0].get("status") == condition["status"] and current[0].get("reason") == reason:
            return
        merge_patch(
            self.api,
            f"{OPERATOR}/klusterlets/klusterlet/status",
            {"status": {"conditions": with_condition(klusterlet, condition)}},
        )

