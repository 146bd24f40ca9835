"""Least privilege of every credential fleetplan hands out, as a SubjectAccessReview matrix.

For each credential (the Antrea member token delivered to a member; the OCM bootstrap token in a
spoke's bootstrap kubeconfig) the real token is read from where fleetplan put it, a TokenReview on
the issuing cluster says who it is (user and groups), and a SubjectAccessReview per row asks the
cluster's real authorizer (RBAC) whether that identity may do it. Rows say what the agent needs
(must be allowed) and a written list of what it must never do (other namespaces, Secrets,
cluster-wide writes, impersonation, escalate, bind, approving CSRs): must be denied.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from fleetkit import record

from fleetplan.lab.clusters import admin_rest

pytestmark = pytest.mark.integration
MC = "multicluster.crd.antrea.io"
RBAC = "rbac.authorization.k8s.io"

# (verb, group, resource, namespace or "{ns}" for the leader namespace or "" for cluster-wide)
ANTREA_NEEDS = [
    ("create", MC, "memberclusterannounces", "{ns}"), ("get", MC, "memberclusterannounces", "{ns}"),
    ("update", MC, "memberclusterannounces", "{ns}"), ("delete", MC, "memberclusterannounces", "{ns}"),
    ("watch", MC, "memberclusterannounces", "{ns}"), ("create", MC, "resourceexports", "{ns}"),
    ("update", MC, "resourceexports", "{ns}"), ("delete", MC, "resourceexports", "{ns}"),
    ("list", MC, "resourceimports", "{ns}"), ("watch", MC, "resourceimports", "{ns}"),
    ("create", "", "events", "{ns}"),
]
ANTREA_MUST_NOT = [
    ("create", MC, "memberclusterannounces", "default"), ("list", MC, "resourceimports", "kube-system"),
    ("get", "", "secrets", "{ns}"), ("list", "", "secrets", "{ns}"), ("list", "", "secrets", ""),
    ("get", "", "secrets", "kube-system"), ("create", "", "configmaps", "{ns}"), ("create", "", "pods", "{ns}"),
    ("create", "", "serviceaccounts/token", "{ns}"), ("update", MC, "clustersets", "{ns}"),
    ("delete", MC, "clustersets", "{ns}"), ("create", RBAC, "rolebindings", "{ns}"),
    ("update", RBAC, "roles", "{ns}"), ("escalate", RBAC, "roles", "{ns}"), ("bind", RBAC, "roles", "{ns}"),
    ("bind", RBAC, "clusterroles", ""), ("escalate", RBAC, "clusterroles", ""),
    ("create", RBAC, "clusterrolebindings", ""), ("create", "", "namespaces", ""), ("delete", "", "namespaces", ""),
    ("impersonate", "", "users", ""), ("impersonate", "", "groups", ""), ("impersonate", "", "serviceaccounts", ""),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", ""),
    ("create", "", "nodes", ""), ("get", "", "nodes/proxy", ""),
]
OCM_NEEDS = [
    ("create", "certificates.k8s.io", "certificatesigningrequests", ""),
    ("get", "certificates.k8s.io", "certificatesigningrequests", ""),
    ("create", "cluster.open-cluster-management.io", "managedclusters", ""),
    ("get", "cluster.open-cluster-management.io", "managedclusters", ""),
]
OCM_MUST_NOT = [
    ("update", "certificates.k8s.io", "certificatesigningrequests/approval", ""),
    ("approve", "certificates.k8s.io", "signers", ""),
    ("delete", "certificates.k8s.io", "certificatesigningrequests", ""),
    ("update", "cluster.open-cluster-management.io", "managedclusters", ""),
    ("patch", "cluster.open-cluster-management.io", "managedclusters", ""),
    ("delete", "cluster.open-cluster-management.io", "managedclusters", ""),
    ("create", "cluster.open-cluster-management.io", "managedclustersets", ""),
    ("get", "", "secrets", "open-cluster-management"), ("list", "", "secrets", ""),
    ("create", "work.open-cluster-management.io", "manifestworks", "default"),
    ("create", "", "namespaces", ""), ("create", RBAC, "clusterrolebindings", ""),
    ("bind", RBAC, "clusterroles", ""), ("escalate", RBAC, "clusterroles", ""),
    ("impersonate", "", "users", ""), ("impersonate", "", "groups", ""), ("impersonate", "", "serviceaccounts", ""),
    ("create", "", "serviceaccounts/token", "open-cluster-management"),
]


def who(cluster: Any, token: str) -> tuple[str, list[str]]:
    review = admin_rest(cluster).call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    status = review["status"]
    assert status.get("authenticated"), f"the delivered token does not authenticate: {status}"
    return status["user"]["username"], list(status["user"].get("groups") or [])


def allowed(cluster: Any, user: str, groups: list[str], verb: str, group: str, resource: str, ns: str) -> bool:
    resource, _, sub = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": ns}
    review = admin_rest(cluster).call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "resourceAttributes": attributes}})
    return bool(review["status"].get("allowed"))


def run_matrix(credential: str, cluster: Any, token: str, needs: list[tuple[str, str, str, str]],
               must_not: list[tuple[str, str, str, str]], ns: str) -> list[str]:
    user, groups = who(cluster, token)
    wrong = []
    for expected, rows in ((True, needs), (False, must_not)):
        for verb, group, resource, namespace in rows:
            target = namespace.replace("{ns}", ns)
            got = allowed(cluster, user, groups, verb, group, resource, target)
            record("privilege", credential=f"{credential} ({user})", verb=verb,
                   resource=f"{group + '/' if group else ''}{resource}", namespace=target or "(cluster)",
                   expected="allowed" if expected else "denied", allowed="yes" if got else "no", ok=got == expected)
            if got != expected:
                wrong.append(f"{verb} {group}/{resource} in {target or 'cluster'}: {'allowed' if got else 'denied'}")
    return wrong


def test_antrea_member_token_matrix(antrea_fleet: Any) -> None:
    env = antrea_fleet
    env.cli("apply", "--auto-approve", "-f", str(env.fleet_file))
    member = env.members[0]
    secret = admin_rest(member).get(f"/api/v1/namespaces/kube-system/secrets/member-{member.name}-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    wrong = run_matrix(f"Antrea member token of {member.name}", env.leader, token, ANTREA_NEEDS, ANTREA_MUST_NOT,
                       env.ns)
    assert not wrong, wrong


def test_ocm_bootstrap_token_matrix(ocm_fleet: Any) -> None:
    hub, spoke = ocm_fleet.hub, ocm_fleet.spokes[0]
    secret = admin_rest(spoke).get("/api/v1/namespaces/open-cluster-management-agent/secrets/bootstrap-hub-kubeconfig")
    from ruamel.yaml import YAML

    config = YAML(typ="safe").load(base64.b64decode(secret["data"]["kubeconfig"]).decode())
    token = config["users"][0]["user"]["token"]
    wrong = run_matrix(f"OCM bootstrap token for {spoke.name}", hub, token, OCM_NEEDS, OCM_MUST_NOT, "")
    assert not wrong, wrong
    assert json.dumps(config).count(token) == 1
