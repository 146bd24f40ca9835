"""The Antrea stack on the lab (1 leader + 2 members, genuine v2.7.0 manifests from the mirror),
planned and applied by the real engine, with the controller and member agent SIMULATIONS.

What each test shows is issue 5's "done when": apply converges and the next plan is empty; the
member agent simulation announces with only the token fleetplan delivered, whose ServiceAccount
carries the cluster-ID annotation the leader's webhook checks, and RBAC confines it; adding,
removing and rotating plan only the expected steps; destroy refuses while a member still announces
and otherwise leaves nothing fleetplan created.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from conftest import MC, AntreaLab, changes, converge, failures, replan

from fleetplan.cli.planning import Session
from fleetplan.lab import LabCluster
from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.simulators.antrea import BearerRest, wait_until
from fleetplan.live.clusters import KubeCluster
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.live.reading import selector
from fleetplan.plan.model import Mode

pytestmark = pytest.mark.integration
MCA = "/apis/multicluster.crd.antrea.io/v1alpha1/namespaces/{ns}/memberclusterannounces"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def announce(env: AntreaLab, member: LabCluster) -> dict[str, Any] | None:
    status, _ = admin_rest(env.leader).request("GET", MCA.format(ns=env.ns) + f"/member-announce-from-{member.name}")
    if status != 200:
        return None
    found: dict[str, Any] = admin_rest(env.leader).get(MCA.format(ns=env.ns) + f"/member-announce-from-{member.name}")
    return found


def delivered(member: LabCluster) -> tuple[str, str]:
    """(token, ca.crt) from the Secret fleetplan wrote into the member."""
    secret = admin_rest(member).get(f"/api/v1/namespaces/kube-system/secrets/member-{member.name}-token")
    data = secret["data"]
    return base64.b64decode(data["token"]).decode(), base64.b64decode(data["ca.crt"]).decode()


def touched_since(env: AntreaLab, member: LabCluster, stamp: str) -> bool:
    found = announce(env, member)
    return found is not None and found["metadata"]["annotations"]["touch-ts"] > stamp


def announced_by(env: AntreaLab, member: LabCluster) -> str | None:
    return env.controllers[env.leader.name].announcers.get(f"member-announce-from-{member.name}")


def can(rest: BearerRest, verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
    attributes = {"verb": verb, "resource": resource, "group": group, "namespace": namespace}
    status, raw = rest.request("POST", SSAR, {"apiVersion": "authorization.k8s.io/v1",
                                              "kind": "SelfSubjectAccessReview",
                                              "spec": {"resourceAttributes": attributes}})
    assert status == 201, raw
    import json

    allowed: bool = json.loads(raw)["status"].get("allowed", False)
    return allowed


def owned_leftovers(cluster: LabCluster, fleet: str) -> list[str]:
    """Every object on `cluster` carrying the fleet's ownership labels."""
    api = KubeCluster(ClusterAccess(cluster.name, cluster.kubeconfig, cluster.context))
    kinds = [("apiextensions.k8s.io/v1", "CustomResourceDefinition"), ("v1", "Namespace"),
             ("rbac.authorization.k8s.io/v1", "ClusterRole"), ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
             ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
             ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"), ("apps/v1", "Deployment"),
             ("v1", "Service"), ("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("v1", "Secret"),
             ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"),
             (f"{MC}/v1alpha2", "ClusterSet")]
    found = []
    for api_version, kind in kinds:
        for obj in api.list(api_version, kind, "", selector(fleet)):
            meta = obj["metadata"]
            found.append(f"{cluster.name}/{kind}/{meta.get('namespace', '-')}/{meta['name']}")
    return found


def test_apply_converges_and_members_announce_with_only_their_token(antrea_lab: AntreaLab) -> None:
    env = antrea_lab
    fleet = env.full_fleet()
    _, summary = converge(fleet)
    assert not failures(summary), "\n".join(failures(summary) + env.logs[-20:])
    # The controller simulation filled caBundle on the webhooks fleetplan applied (as the real
    # controller does); the diff must not count that, nor the status the simulations set.
    webhooks = admin_rest(env.leader).get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                                          f"{env.ns}-antrea-mc-validating-webhook-configuration")
    assert all(h["clientConfig"].get("caBundle") for h in webhooks["webhooks"])
    assert changes(replan(fleet)) == set()

    for member in env.members:
        found = announce(env, member)
        assert found is not None, env.logs[-20:]
        assert (found["clusterID"], found["clusterSetID"], found["leaderClusterID"]) == (
            member.name, env.set_id, env.leader.name)
        # Written with the delivered token: the leader's webhook saw the member's ServiceAccount.
        assert announced_by(env, member) == f"system:serviceaccount:{env.ns}:member-{member.name}-token"
        stamp = found["metadata"]["annotations"]["touch-ts"]
        assert wait_until(lambda m=member, s=stamp: touched_since(env, m, s), 5)  # refreshed
        account = admin_rest(env.leader).get(f"/api/v1/namespaces/{env.ns}/serviceaccounts/member-{member.name}-token")
        assert account["metadata"]["annotations"]["multicluster.antrea.io/cluster-id"] == member.name

    member = env.members[0]
    token, ca = delivered(member)
    as_member = BearerRest(env.leader.server, token, ca)
    assert can(as_member, "create", "memberclusterannounces", env.ns, MC)
    assert can(as_member, "update", "memberclusterannounces", env.ns, MC)
    assert not can(as_member, "create", "memberclusterannounces", "default", MC)
    assert not can(as_member, "create", "configmaps", env.ns)
    assert not can(as_member, "get", "secrets", env.ns)
    assert not can(as_member, "list", "secrets")
    assert as_member.request("GET", f"/api/v1/namespaces/{env.ns}/secrets")[0] == 403
    spoof = {"apiVersion": f"{MC}/v1alpha1", "kind": "MemberClusterAnnounce",
             "metadata": {"name": f"member-announce-from-{env.members[1].name}"},
             "clusterID": env.members[1].name, "clusterSetID": env.set_id, "leaderClusterID": env.leader.name}
    assert as_member.request("POST", MCA.format(ns="default"), spoof)[0] == 403  # RBAC
    status, raw = as_member.request("POST", MCA.format(ns=env.ns), spoof)  # admission runs before storage
    assert status >= 400 and b"bound to cluster ID" in raw, raw  # the webhook: no spoofing another member
    assert all("simulation" in line for line in env.logs)


def test_rotate_remove_and_add_members_plan_only_their_steps(antrea_lab: AntreaLab) -> None:
    env = antrea_lab
    west, east = env.members
    fleet = env.full_fleet()
    _, summary = converge(fleet)
    assert not failures(summary), failures(summary)

    # Rotation: within rotateBefore, every token is re-minted and re-delivered, nothing else.
    tokens = {m.name: delivered(m)[0] for m in env.members}
    rotating = env.full_fleet(name="rotating", tokens={"ttl": "24h", "rotateBefore": "23h59m59s"})
    time.sleep(1.5)
    expected = {("update", f"{env.leader.name}/fleetplan.dev/BoundToken/{env.ns}/member-{m.name}-token")
                for m in env.members}
    expected |= {("update", f"{m.name}/core/Secret/kube-system/member-{m.name}-token") for m in env.members}
    assert changes(replan(rotating)) == expected
    stamp = max(announce(env, m)["metadata"]["annotations"]["touch-ts"] for m in env.members)  # type: ignore[index]
    _, summary = converge(rotating)
    assert not failures(summary), failures(summary)
    for member in env.members:
        assert delivered(member)[0] != tokens[member.name]
        # The member still authenticates, now with the new token.
        assert wait_until(lambda m=member: touched_since(env, m, stamp), 10), env.logs[-10:]
    # Back to ttl 24h / rotateBefore 6h: the fresh tokens are fine.
    assert changes(replan(fleet)) == set()

    # Removing east: east leaves (its ClusterSet, token copy and bundle go) and its token is revoked.
    session = Session.open(str(fleet))
    east_steps = {str(r.address) for r in session.desired.resources
                  if r.address.cluster == east.name or r.address.name == f"member-{east.name}-token"}
    smaller = env.full_fleet((west,), name="smaller")
    assert changes(replan(smaller)) == {("delete", a) for a in east_steps}
    _, summary = converge(smaller)
    assert not failures(summary), failures(summary)
    assert announce(env, east) is None  # it left before its token was revoked
    assert admin_rest(env.leader).request(
        "GET", f"/api/v1/namespaces/{env.ns}/serviceaccounts/member-{east.name}-token")[0] == 404
    assert announce(env, west) is not None
    assert changes(replan(smaller)) == set()

    # Adding it back plans exactly its steps again, and it joins.
    assert changes(replan(fleet)) == {("create", a) for a in east_steps}
    _, summary = converge(fleet)
    assert not failures(summary), failures(summary)
    assert announce(env, east) is not None
    assert changes(replan(fleet)) == set()


def test_destroy_refuses_while_a_member_announces_then_leaves_nothing(antrea_lab: AntreaLab) -> None:
    env = antrea_lab
    west, east = env.members
    fleet = env.full_fleet(wait={"timeout": "15s"})
    _, summary = converge(fleet)
    assert not failures(summary), failures(summary)
    # east's member controller is gone (a dead cluster): it cannot leave, so its announce stays.
    env.agents[east.name].stop()
    _, summary = converge(fleet, Mode.DESTROY)
    problems = failures(summary)
    assert any("refusing to delete ClusterSet" in p and f"member-announce-from-{east.name}" in p
               for p in problems), problems
    leader_cs = f"/apis/{MC}/v1alpha2/namespaces/{env.ns}/clustersets/{env.set_id}"
    assert admin_rest(env.leader).request("GET", leader_cs)[0] == 200  # the leader was kept
    assert announce(env, west) is None  # west left in the same run

    # The leader's stale-member cleanup (24 h upstream) removes the announce; then destroy finishes.
    admin_rest(env.leader).call("DELETE", MCA.format(ns=env.ns) + f"/member-announce-from-{east.name}")
    _, summary = converge(fleet, Mode.DESTROY)
    assert not failures(summary), failures(summary)
    name = f"antrea-{env.suffix}"
    assert [x for c in (env.leader, *env.members) for x in owned_leftovers(c, name)] == []
    assert admin_rest(env.leader).request("GET", f"/api/v1/namespaces/{env.ns}")[0] == 404
    state = Session.open(str(fleet)).store.read()
    assert state is not None and not state.resources


def test_plan_warns_when_a_members_multicluster_gate_is_off(antrea_lab: AntreaLab) -> None:
    env = antrea_lab
    west, east = env.members
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "antrea-config"},
              "data": {"antrea-agent.conf": "featureGates:\n  Multicluster: false\n"}}
    admin_rest(west).call("POST", "/api/v1/namespaces/kube-system/configmaps", config)
    try:
        fleet = env.full_fleet()
        warnings = [w for w in replan(fleet).warnings if "Multicluster" in w.summary]
        assert [(w.address, w.severity) for w in warnings] == [(f"{west.name}/kube-system/antrea-config", "warning")]
        from fleetplan.plan.rendering import render_human

        shown = render_human(replan(fleet))
        assert shown.startswith("Warning: antrea-agent's Multicluster feature gate is off") and east.name not in \
            shown.splitlines()[0]
    finally:
        admin_rest(west).call("DELETE", "/api/v1/namespaces/kube-system/configmaps/antrea-config")
