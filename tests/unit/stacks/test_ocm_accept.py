"""Acceptance decides per CSR, refuses competing agents, is a no-op when done, and times out by name."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fleetplan.errors import ClusterError
from fleetplan.live.ocm_accept import (
    CompetingRequestersError,
    Verdict,
    accept_cluster,
    check_no_manifest_works,
    judge_csrs,
    release_cluster,
)

BOOT = "system:serviceaccount:open-cluster-management:agent-registration-bootstrap-west"
OTHER = "system:serviceaccount:open-cluster-management:agent-registration-bootstrap-east"
KEY = ec.generate_private_key(ec.SECP256R1())


def _request(cluster: str, agent: str = "agent1") -> str:
    group = f"system:open-cluster-management:{cluster}"
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
        x509.NameAttribute(NameOID.COMMON_NAME, f"{group}:{agent}")])).sign(KEY, hashes.SHA256())
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


def _csr(name: str, *, label: str = "west", user: str = BOOT, subject_cluster: str = "west",
         agent: str = "agent1", usages: tuple[str, ...] = ("digital signature", "client auth"),
         conditions: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"open-cluster-management.io/cluster-name": label}},
            "spec": {"username": user, "signerName": "kubernetes.io/kube-apiserver-client",
                     "usages": list(usages), "request": _request(subject_cluster, agent)},
            "status": {"conditions": [{"type": t, "status": "True"} for t in conditions]}}


class FakeHub:
    """A dict-backed hub for the pure decision logic (not an API server)."""

    name = "hub"

    def __init__(self, managed: dict[str, Any] | None = None, csrs: list[dict[str, Any]] | None = None,
                 works: list[str] | None = None) -> None:
        self.managed = managed
        self.csrs = csrs or []
        self.works = works or []
        self.approved: list[str] = []
        self.accepted: list[Mapping[str, str]] = []
        self.deleted: list[str] = []

    def get_managed_cluster(self, cluster: str) -> dict[str, Any] | None:
        return self.managed

    def list_cluster_csrs(self, cluster: str) -> list[dict[str, Any]]:
        return list(self.csrs)

    def approve_csr(self, csr: dict[str, Any], message: str) -> None:
        self.approved.append(csr["metadata"]["name"])

    def accept_managed_cluster(self, cluster: str, labels: Mapping[str, str]) -> None:
        self.accepted.append(dict(labels))

    def list_manifest_works(self, namespace: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": n}} for n in self.works]

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self.deleted.append(f"{kind}/{name}")
        if kind == "ManagedCluster":
            self.managed = None
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_only_the_bootstrap_identitys_csr_naming_the_cluster_is_approved() -> None:
    verdicts = {j.name: j for j in judge_csrs("west", [BOOT], [
        _csr("good"),
        _csr("from-east", user=OTHER),
        _csr("names-east", subject_cluster="east"),
        _csr("server", usages=("server auth",)),
        _csr("unlabelled", label="east"),
        _csr("old", conditions=("Approved",)),
        _csr("denied", conditions=("Denied",)),
    ])}
    assert verdicts["good"].verdict == Verdict.APPROVE
    assert verdicts["from-east"].verdict == Verdict.IGNORE
    assert "not by the bootstrap identity" in verdicts["from-east"].reason
    assert verdicts["names-east"].verdict == Verdict.IGNORE
    assert "does not name cluster west" in verdicts["names-east"].reason
    assert verdicts["server"].verdict == Verdict.IGNORE
    assert verdicts["unlabelled"].verdict == Verdict.IGNORE
    assert verdicts["old"].verdict == Verdict.APPROVED
    assert verdicts["denied"].verdict == Verdict.CLOSED


def test_competing_agents_are_refused() -> None:
    with pytest.raises(CompetingRequestersError, match="compete") as err:
        judge_csrs("west", [BOOT], [_csr("a", agent="one"), _csr("b", agent="two")])
    assert "none was approved" in str(err.value)


def test_accept_approves_and_labels_then_is_a_no_op_once_joined() -> None:
    hub = FakeHub({"metadata": {"name": "west"}, "spec": {"hubAcceptsClient": False}},
                  [_csr("good"), _csr("intruder", user=OTHER)])
    labels = {"cluster.open-cluster-management.io/clusterset": "set"}
    outcome = accept_cluster(hub, "west", [BOOT], labels, timeout=5)
    assert hub.approved == ["good"] and outcome.approved == ("good",)
    assert [j.name for j in outcome.ignored] == ["intruder"]
    assert hub.accepted == [labels] and outcome.changed

    done = FakeHub({"metadata": {"name": "west", "labels": labels}, "spec": {"hubAcceptsClient": True},
                    "status": {"conditions": [{"type": "ManagedClusterJoined", "status": "True"}]}}, [])
    again = accept_cluster(done, "west", [BOOT], labels, timeout=0)
    assert not again.changed and done.approved == [] and done.accepted == []


def test_accepted_and_joined_cluster_with_new_labels_is_relabelled_without_a_csr() -> None:
    hub = FakeHub({"metadata": {"name": "west", "labels": {}}, "spec": {"hubAcceptsClient": True},
                   "status": {"conditions": [{"type": "ManagedClusterJoined", "status": "True"}]}})
    outcome = accept_cluster(hub, "west", [BOOT], {"env": "prod"}, timeout=0)
    assert outcome.changed and hub.accepted == [{"env": "prod"}] and hub.approved == []


def test_missing_managed_cluster_times_out_naming_the_cluster() -> None:
    clock = Clock()
    with pytest.raises(ClusterError, match="ManagedCluster west to appear") as err:
        accept_cluster(FakeHub(), "west", [BOOT], {}, timeout=30, clock=clock, sleep=clock.sleep)
    assert clock.now >= 30 and "spoke west" in str(err.value)


def test_only_foreign_csrs_time_out_and_say_why_they_were_ignored() -> None:
    clock = Clock()
    hub = FakeHub({"metadata": {"name": "west"}, "spec": {}}, [_csr("intruder", user=OTHER)])
    with pytest.raises(ClusterError, match="ignored CSR intruder: requested by"):
        accept_cluster(hub, "west", [BOOT], {}, timeout=3, clock=clock, sleep=clock.sleep)
    assert hub.approved == [] and hub.accepted == []


def test_removal_is_refused_while_manifest_works_target_the_spoke() -> None:
    hub = FakeHub(works=["deploy-app"])
    with pytest.raises(ClusterError, match=r"ManifestWork.*deploy-app.*refusing"):
        check_no_manifest_works(hub, "west", force=False)
    assert check_no_manifest_works(hub, "west", force=True) == ("deploy-app",)
    assert check_no_manifest_works(FakeHub(), "west", force=False) == ()


def test_release_deletes_csrs_cluster_and_namespace() -> None:
    hub = FakeHub({"metadata": {"name": "west"}}, [_csr("c1"), _csr("c2")])
    deleted = release_cluster(hub, "west", timeout=1)
    assert deleted == ("CertificateSigningRequest/c1", "CertificateSigningRequest/c2",
                       "ManagedCluster/west", "Namespace/west")


def test_a_bootstrap_token_csr_is_approved_only_with_the_spokes_own_group() -> None:
    west = "system:bootstrappers:managedcluster:agent-registration-bootstrap-west"
    east = "system:bootstrappers:managedcluster:agent-registration-bootstrap-east"

    def verdict(user: str, groups: list[str]) -> Verdict:
        csr = _csr("c1", user=user)
        csr["spec"]["groups"] = [*groups, "system:bootstrappers", "system:authenticated"]
        return judge_csrs("west", [f"group:{west}"], [csr])[0].verdict

    assert verdict("system:bootstrap:abc123", [west]) == Verdict.APPROVE
    assert verdict("system:bootstrap:abc123", [east]) == Verdict.IGNORE  # another spoke's token
    assert verdict("system:bootstrap:abc123", []) == Verdict.IGNORE
    assert verdict(BOOT, [west]) == Verdict.IGNORE  # the group alone does not make a bootstrap token
