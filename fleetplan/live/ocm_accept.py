"""OCM acceptance and release on the hub: what `clusteradm accept` does, made safe and idempotent.

`accept_cluster` waits for the spoke's ManagedCluster and CSR, approves only CSRs that are
labelled for that cluster, requested by the spoke's bootstrap identity, signed by the client
signer, for client auth, and whose subject names the cluster; it refuses when several agents
compete for the name; then it sets `hubAcceptsClient: true` and the fleet's labels. A cluster that
is already accepted and joined is a no-op (no waiting for a CSR that was cleaned up long ago).
`check_no_manifest_works` is the guard before a spoke is removed; `release_cluster` deletes the
spoke's CSRs, ManagedCluster and hub namespace once the spoke has been unjoined.

Invariants: the decision about each CSR (`judge_csrs`) is a pure function of the CSR list, so it is
unit-tested without a cluster; everything that talks to the hub goes through the small `OcmHub`
protocol (`ClusterOcmHub` adapts the engine's `Cluster`); no CSR outside the verdict `APPROVE` is
ever approved; errors name the cluster and the hub.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from cryptography import x509
from cryptography.x509.oid import NameOID

from fleetplan.errors import ClusterError

Obj = dict[str, Any]
CSR_CLUSTER_LABEL = "open-cluster-management.io/cluster-name"
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
ALLOWED_USAGES = frozenset({"client auth", "digital signature", "key encipherment"})
CLUSTER_API = "cluster.open-cluster-management.io/v1"
WORK_API = "work.open-cluster-management.io/v1"
CSR_API = "certificates.k8s.io/v1"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"


class Verdict(StrEnum):
    APPROVE = "approve"  # pending and valid: approve it
    APPROVED = "approved"  # already approved, and from the bootstrap identity
    IGNORE = "ignore"  # never approved by fleetplan; `reason` says why
    CLOSED = "closed"  # denied or failed


@dataclass(frozen=True)
class CsrJudgement:
    name: str
    requester: str  # spec.username
    agent: str  # the subject CN, i.e. which agent instance asks
    verdict: Verdict
    reason: str = ""


class CompetingRequestersError(ClusterError):
    """Several agents ask for the same cluster's certificate; approving any would be a guess."""


class OcmHub(Protocol):
    """What acceptance and release need from the hub."""

    name: str

    def get_managed_cluster(self, cluster: str) -> Obj | None: ...
    def list_cluster_csrs(self, cluster: str) -> list[Obj]: ...
    def approve_csr(self, csr: Obj, message: str) -> None: ...
    def accept_managed_cluster(self, cluster: str, labels: Mapping[str, str]) -> None: ...
    def list_manifest_works(self, namespace: str) -> list[Obj]: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool: ...


def _subject(csr: Obj) -> tuple[str, tuple[str, ...]]:
    """(CN, organizations) of the CSR's request; ("", ()) when it cannot be parsed."""
    try:
        pem = base64.b64decode(csr.get("spec", {}).get("request", ""))
        request = x509.load_pem_x509_csr(pem)
    except (ValueError, TypeError):
        return "", ()
    cns = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return (str(cns[0].value) if cns else "", tuple(str(o.value) for o in orgs))


def _state(csr: Obj) -> str:
    types = {c.get("type") for c in (csr.get("status") or {}).get("conditions") or []}
    if "Denied" in types or "Failed" in types:
        return "closed"
    return "approved" if "Approved" in types else "pending"


def _requested_by(username: str, groups: Iterable[str], allowed: frozenset[str]) -> bool:
    """`allowed` names users, or `group:<name>` for a bootstrap token's own group: the requester
    of such a CSR is `system:bootstrap:<token-id>` (the ID is random) and carries that group."""
    if username in allowed:
        return True
    return username.startswith(BOOTSTRAP_USER_PREFIX) and any(f"group:{g}" in allowed for g in groups)


def judge_csrs(cluster: str, requesters: Iterable[str], csrs: Sequence[Obj]) -> list[CsrJudgement]:
    """Pure: what to do with each CSR of `cluster`; raises CompetingRequestersError when pending
    valid CSRs come from more than one agent or requester."""
    allowed = frozenset(requesters)
    group = f"system:open-cluster-management:{cluster}"
    out: list[CsrJudgement] = []
    for csr in sorted(csrs, key=lambda c: str(c.get("metadata", {}).get("name", ""))):
        meta, spec = csr.get("metadata", {}), csr.get("spec", {})
        name, requester = str(meta.get("name", "")), str(spec.get("username", ""))
        cn, orgs = _subject(csr)
        state = _state(csr)
        usages = set(spec.get("usages") or ())
        reason = ""
        if (meta.get("labels") or {}).get(CSR_CLUSTER_LABEL) != cluster:
            reason = f"not labelled {CSR_CLUSTER_LABEL}={cluster}"
        elif not _requested_by(requester, spec.get("groups") or (), allowed):
            reason = f"requested by {requester or 'an unknown user'}, not by the bootstrap identity"
        elif spec.get("signerName") != CLIENT_SIGNER:
            reason = f"signer {spec.get('signerName')!r} is not {CLIENT_SIGNER}"
        elif not usages <= ALLOWED_USAGES or "client auth" not in usages:
            reason = f"usages {sorted(usages)} are not a client certificate's"
        elif group not in orgs or not cn.startswith(group + ":"):
            reason = f"its subject (CN {cn or '?'}) does not name cluster {cluster}"
        if state == "closed":
            out.append(CsrJudgement(name, requester, cn, Verdict.CLOSED, "denied or failed"))
        elif reason:
            out.append(CsrJudgement(name, requester, cn, Verdict.IGNORE, reason))
        else:
            out.append(CsrJudgement(name, requester, cn,
                                    Verdict.APPROVED if state == "approved" else Verdict.APPROVE))
    pending = [j for j in out if j.verdict == Verdict.APPROVE]
    agents = sorted({j.agent for j in pending})
    users = sorted({j.requester for j in pending})
    if len(agents) > 1 or len(users) > 1:
        listed = ", ".join(f"{j.name} ({j.agent} as {j.requester})" for j in pending)
        raise CompetingRequestersError(
            f"cluster {cluster}: {len(pending)} pending CSRs from different agents compete for its "
            f"certificate: {listed}; none was approved",
            hint="find which agent is the real one, delete the other CSRs (kubectl delete csr NAME) "
                 "and apply again")
    return out


@dataclass(frozen=True)
class AcceptOutcome:
    cluster: str
    approved: tuple[str, ...] = ()
    ignored: tuple[CsrJudgement, ...] = ()
    changed: bool = False  # False: it was already accepted, labelled and joined
    notes: tuple[str, ...] = field(default=())


def _joined(managed_cluster: Obj) -> bool:
    for condition in (managed_cluster.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "ManagedClusterJoined" and condition.get("status") == "True":
            return True
    return False


def _labels_match(managed_cluster: Obj, labels: Mapping[str, str]) -> bool:
    live = (managed_cluster.get("metadata") or {}).get("labels") or {}
    return all(live.get(k) == v for k, v in labels.items())


def accept_cluster(hub: OcmHub, cluster: str, requesters: Iterable[str], labels: Mapping[str, str],
                   timeout: float, *, poll: float = 1.0, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> AcceptOutcome:
    """Approve the spoke's CSR and accept its ManagedCluster; raises ClusterError on timeout."""
    allowed = tuple(requesters)
    deadline = clock() + timeout
    waiting_for = f"ManagedCluster {cluster} to appear"
    ignored: tuple[CsrJudgement, ...] = ()
    while True:
        managed = hub.get_managed_cluster(cluster)
        if managed is not None:
            judgements = judge_csrs(cluster, allowed, hub.list_cluster_csrs(cluster))
            ignored = tuple(j for j in judgements if j.verdict == Verdict.IGNORE)
            pending = [j for j in judgements if j.verdict == Verdict.APPROVE]
            accepted = (managed.get("spec") or {}).get("hubAcceptsClient") is True
            if accepted and _joined(managed) and not pending and _labels_match(managed, labels):
                return AcceptOutcome(cluster, ignored=ignored, changed=False)
            if pending or _joined(managed) or any(j.verdict == Verdict.APPROVED for j in judgements):
                csrs = {str(c["metadata"]["name"]): c for c in hub.list_cluster_csrs(cluster)}
                for judgement in pending:
                    hub.approve_csr(csrs[judgement.name],
                                    f"approved by fleetplan for cluster {cluster} "
                                    f"(requester {judgement.requester})")
                hub.accept_managed_cluster(cluster, labels)
                return AcceptOutcome(cluster, tuple(j.name for j in pending), ignored, changed=True)
            waiting_for = f"a CSR of cluster {cluster} from its bootstrap identity"
        if clock() >= deadline:
            detail = "".join(f"; ignored CSR {j.name}: {j.reason}" for j in ignored)
            raise ClusterError(
                f"hub {hub.name}: timed out after {timeout:g}s waiting for {waiting_for}{detail}",
                address=cluster,
                hint=f"check the klusterlet agent on spoke {cluster}: its Secret "
                     "open-cluster-management-agent/bootstrap-hub-kubeconfig and its logs; "
                     "raise spec.wait.timeout for slow agents")
        sleep(poll)


def check_no_manifest_works(hub: OcmHub, cluster: str, force: bool) -> tuple[str, ...]:
    """Refuse to remove a spoke that ManifestWorks still target, unless forced; returns them."""
    works = tuple(sorted(str(w["metadata"]["name"]) for w in hub.list_manifest_works(cluster)))
    if works and not force:
        shown = ", ".join(works[:5]) + (" ..." if len(works) > 5 else "")
        raise ClusterError(
            f"hub {hub.name}: spoke {cluster} is still the target of {len(works)} ManifestWork(s) "
            f"in namespace {cluster}: {shown}; refusing to remove it",
            address=cluster,
            hint="delete those ManifestWorks first, or run again with --force to remove the spoke "
                 "and abandon them")
    return works


def release_cluster(hub: OcmHub, cluster: str, *, timeout: float = 60.0, poll: float = 1.0,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> tuple[str, ...]:
    """Delete the spoke's CSRs, ManagedCluster and hub namespace; waits until the ManagedCluster
    is gone. Returns what was deleted, as `kind/name`."""
    deleted: list[str] = []
    for csr in hub.list_cluster_csrs(cluster):
        name = str(csr["metadata"]["name"])
        if hub.delete(CSR_API, "CertificateSigningRequest", "", name):
            deleted.append(f"CertificateSigningRequest/{name}")
    if hub.delete(CLUSTER_API, "ManagedCluster", "", cluster):
        deleted.append(f"ManagedCluster/{cluster}")
    if hub.delete("v1", "Namespace", "", cluster):
        deleted.append(f"Namespace/{cluster}")
    deadline = clock() + timeout
    while hub.get_managed_cluster(cluster) is not None:
        if clock() >= deadline:
            raise ClusterError(f"hub {hub.name}: ManagedCluster {cluster} is still there {timeout:g}s "
                               "after its deletion", address=cluster,
                               hint="a finalizer may be waiting for the hub's controllers; "
                                    "check the ManagedCluster's metadata.finalizers")
        sleep(poll)
    return tuple(deleted)
