"""The Antrea stack rendered against the genuine upstream v2.7.0 manifests (FLEETPLAN_MIRROR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fleetplan.addrs import Address
from fleetplan.config import Fleet
from fleetplan.errors import ConfigError
from fleetplan.graph.building import build_graph
from fleetplan.stacks.antrea import CLUSTER_ID_ANNOTATION, MC_GROUP, desired_fleet
from fleetplan.stacks.bundles import ENV_MIRROR, BundleError, BundleSource
from fleetplan.stacks.desired import DesiredFleet, Handler, ReadinessKind, Ref

MIRROR = Path(os.environ.get(ENV_MIRROR) or Path(__file__).resolve().parents[4] / "shared" / "upstream")
NS = "antrea-multicluster"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> BundleSource:
    return BundleSource(mirror=MIRROR, cache_dir=tmp_path_factory.mktemp("cache"))


def make_fleet(tmp_path: Path, **spec: Any) -> Fleet:
    members = spec.pop("members", [{"name": "west"}, {"name": "east"}])
    leader = {"name": "north", "apiServer": "https://north.example:6443", **spec.pop("leader", {})}
    body = {"stack": "antrea", "version": "v2.7.0", "clusterSet": {"name": "demo-set"},
            "leader": leader, "members": members, **spec}
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "demo"},
           "spec": body}
    return Fleet.model_validate(doc, context={"base_dir": str(tmp_path)})


def render(tmp_path: Path, source: BundleSource, **spec: Any) -> DesiredFleet:
    return desired_fleet(make_fleet(tmp_path, **spec), bundles=source)


def on(desired: DesiredFleet, cluster: str) -> dict[Address, Any]:
    return {r.address: r for r in desired.resources if r.address.cluster == cluster}


def a(text: str) -> Address:
    return Address.parse(text)


class TestLeader:
    def test_namespace_bundle_and_clusterset(self, tmp_path: Path, source: BundleSource) -> None:
        leader = on(render(tmp_path, source), "north")
        assert a(f"north/core/Namespace/-/{NS}") in leader
        namespaced = [addr for addr in leader if addr.namespace]
        assert namespaced and all(addr.namespace == NS for addr in namespaced)
        cs = leader[a(f"north/{MC_GROUP}/ClusterSet/{NS}/demo-set")]
        assert cs.body["apiVersion"] == "multicluster.crd.antrea.io/v1alpha2"
        assert cs.body["spec"] == {"clusterID": "north", "leaders": [{"clusterID": "north"}], "namespace": NS}
        vwc = a("north/admissionregistration.k8s.io/ValidatingWebhookConfiguration/-/"
                "antrea-multicluster-antrea-mc-validating-webhook-configuration")
        assert vwc in cs.depends_on
        assert leader[vwc].readiness.kind == ReadinessKind.WEBHOOK
        deploy = leader[a(f"north/apps/Deployment/{NS}/antrea-mc-controller")]
        assert deploy.readiness.kind == ReadinessKind.AVAILABLE
        assert deploy.body["spec"]["template"]["spec"]["containers"][0]["image"] == \
            "antrea/antrea-mc-controller:v2.7.0"
        # Created after, and so deleted before, the controller that serves its webhook.
        assert deploy.address in cs.depends_on
        assert a(f"north/core/Service/{NS}/antrea-mc-webhook-service") in cs.depends_on
        assert cs.handler == Handler.ANTREA_LEADER_CLUSTERSET
        crd = leader[a("north/apiextensions.k8s.io/CustomResourceDefinition/-/"
                       "clustersets.multicluster.crd.antrea.io")]
        assert crd.readiness.kind == ReadinessKind.ESTABLISHED

    def test_per_member_bound_tokens_carry_the_cluster_id(self, tmp_path: Path, source: BundleSource) -> None:
        leader = on(render(tmp_path, source, tokens={"kind": "bound", "ttl": "2h", "rotateBefore": "30m"}),
                    "north")
        for member in ("west", "east"):
            name = f"member-{member}-token"
            sa = leader[a(f"north/core/ServiceAccount/{NS}/{name}")]
            assert sa.body["metadata"]["annotations"] == {CLUSTER_ID_ANNOTATION: member}
            rb = leader[a(f"north/rbac.authorization.k8s.io/RoleBinding/{NS}/{name}")]
            assert rb.body["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                          "name": "antrea-mc-member-cluster-role"}
            assert rb.body["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NS}]
            token = leader[a(f"north/fleetplan.dev/BoundToken/{NS}/{name}")]
            assert token.handler == Handler.ANTREA_MEMBER_BOUND_TOKEN
            assert token.options == {"serviceAccount": name, "ttlSeconds": 7200, "rotateBeforeSeconds": 1800}

    def test_secret_tokens(self, tmp_path: Path, source: BundleSource) -> None:
        leader = on(render(tmp_path, source, tokens={"kind": "secret"}), "north")
        token = leader[a(f"north/core/Secret/{NS}/member-west-token")]
        assert token.handler == Handler.ANTREA_MEMBER_SECRET_TOKEN
        assert token.body["type"] == "kubernetes.io/service-account-token"
        assert token.body["metadata"]["annotations"] == {
            "kubernetes.io/service-account.name": "member-west-token", CLUSTER_ID_ANNOTATION: "west"}
        assert not any(addr.kind == "BoundToken" for addr in leader)

    def test_shared_tokens_are_opt_in_and_warned(self, tmp_path: Path, source: BundleSource) -> None:
        desired = render(tmp_path, source, tokens={"strategy": "shared"})
        leader = on(desired, "north")
        accounts = [addr for addr in leader
                    if addr.kind == "ServiceAccount" and addr.name.startswith("member-")]
        assert accounts == [a(f"north/core/ServiceAccount/{NS}/member-shared-token")]
        assert "annotations" not in leader[accounts[0]].body["metadata"] or \
            CLUSTER_ID_ANNOTATION not in leader[accounts[0]].body["metadata"]["annotations"]
        assert any("spoof" in d.summary and d.address == "spec.tokens.strategy" for d in desired.diagnostics)
        assert not render(tmp_path, source).diagnostics

    def test_leader_namespace_and_image_override(self, tmp_path: Path, source: BundleSource) -> None:
        desired = render(tmp_path, source, clusterSet={"name": "demo-set", "namespace": "mc-demo"},
                         antrea={"images": {"leader": "reg.local/mc:v2.7.0-patched"}})
        leader = on(desired, "north")
        assert {addr.namespace for addr in leader if addr.namespace} == {"mc-demo"}
        deploy = leader[a("north/apps/Deployment/mc-demo/antrea-mc-controller")]
        image = deploy.body["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == "reg.local/mc:v2.7.0-patched"
        member_cs = on(desired, "west")[a(f"west/{MC_GROUP}/ClusterSet/kube-system/demo-set")]
        assert member_cs.body["spec"]["namespace"] == "mc-demo"

    def test_prevent_destroy_marks_the_leader_only(self, tmp_path: Path, source: BundleSource) -> None:
        desired = render(tmp_path, source, lifecycle={"preventDestroy": ["leader"]})
        assert all(r.prevent_destroy for r in desired.resources if r.address.cluster == "north")
        assert not any(r.prevent_destroy for r in desired.resources if r.address.cluster != "north")


class TestMember:
    def test_bundle_secret_and_clusterset(self, tmp_path: Path, source: BundleSource) -> None:
        west = on(render(tmp_path, source), "west")
        assert {addr.namespace for addr in west if addr.namespace} == {"kube-system"}
        assert a("west/core/Namespace/-/kube-system") not in west  # never managed, never deleted
        secret = west[a("west/core/Secret/kube-system/member-west-token")]
        token = a(f"north/fleetplan.dev/BoundToken/{NS}/member-west-token")
        assert secret.body["type"] == "Opaque"
        assert secret.body["data"]["token"] == Ref(token, "token", sensitive=True, transform="base64")
        assert secret.body["data"]["ca.crt"] == Ref(token, "ca.crt", sensitive=False, transform="base64")
        assert secret.body["data"]["namespace"] == "YW50cmVhLW11bHRpY2x1c3Rlcg=="  # antrea-multicluster
        assert secret.sensitive_paths == frozenset({"data.token"})
        cs = west[a(f"west/{MC_GROUP}/ClusterSet/kube-system/demo-set")]
        assert cs.body["spec"] == {
            "clusterID": "west", "namespace": NS,
            "leaders": [{"clusterID": "north", "server": "https://north.example:6443",
                         "secret": "member-west-token"}]}
        assert cs.readiness.kind == ReadinessKind.CONDITION and cs.readiness.condition_type == "Ready"
        assert a(f"north/{MC_GROUP}/ClusterSet/{NS}/demo-set") in cs.depends_on

    def test_member_namespace_other_than_kube_system_is_created(self, tmp_path: Path,
                                                                source: BundleSource) -> None:
        west = on(render(tmp_path, source, antrea={"memberNamespace": "mc-member"}), "west")
        assert a("west/core/Namespace/-/mc-member") in west
        assert {addr.namespace for addr in west if addr.namespace} == {"mc-member"}


class TestChanges:
    def test_adding_a_member_adds_only_its_resources(self, tmp_path: Path, source: BundleSource) -> None:
        before = render(tmp_path, source).by_address()
        after = render(tmp_path, source, members=[{"name": "west"}, {"name": "east"}, {"name": "south"}])
        added = set(after.by_address()) - set(before)
        assert {addr.cluster for addr in added} == {"south", "north"}
        assert {addr for addr in added if addr.cluster == "north"} == {
            a(f"north/core/ServiceAccount/{NS}/member-south-token"),
            a(f"north/rbac.authorization.k8s.io/RoleBinding/{NS}/member-south-token"),
            a(f"north/fleetplan.dev/BoundToken/{NS}/member-south-token")}
        assert all(after.by_address()[addr] == res for addr, res in before.items())

    def test_leader_api_server_change_touches_only_member_clustersets(self, tmp_path: Path,
                                                                      source: BundleSource) -> None:
        before = render(tmp_path, source).by_address()
        after = render(tmp_path, source, leader={"apiServer": "https://north.internal:443"}).by_address()
        changed = {addr for addr in before if before[addr] != after[addr]}
        assert changed == {a(f"west/{MC_GROUP}/ClusterSet/kube-system/demo-set"),
                           a(f"east/{MC_GROUP}/ClusterSet/kube-system/demo-set")}

    def test_graph_orders_tokens_before_members_and_members_leave_first(self, tmp_path: Path,
                                                                         source: BundleSource) -> None:
        graph = build_graph(render(tmp_path, source).resources)
        order = graph.creation_order()
        token = a(f"north/fleetplan.dev/BoundToken/{NS}/member-west-token")
        member_cs = a(f"west/{MC_GROUP}/ClusterSet/kube-system/demo-set")
        leader_cs = a(f"north/{MC_GROUP}/ClusterSet/{NS}/demo-set")
        sa = a(f"north/core/ServiceAccount/{NS}/member-west-token")
        assert order.index(sa) < order.index(token) < order.index(member_cs)
        deletion = graph.deletion_order()
        assert deletion.index(member_cs) < deletion.index(leader_cs) < deletion.index(
            a(f"north/core/Namespace/-/{NS}"))


class TestPreflight:
    def test_dash_prefix_pairs_are_refused(self, tmp_path: Path, source: BundleSource) -> None:
        with pytest.raises(ConfigError) as err:
            render(tmp_path, source, members=[{"name": "east"}, {"name": "east-1"}])
        assert "'east' and 'east-1' form a dash-prefix pair" in str(err.value)
        assert "spec.members[1].name" in str(err.value)

    def test_loopback_leader_with_a_remote_member_is_refused(self, tmp_path: Path,
                                                             source: BundleSource) -> None:
        with pytest.raises(ConfigError, match=r"loopback address, but member\(s\) west are not on this"):
            render(tmp_path, source, leader={"apiServer": "https://127.0.1.1:6443"},
                   members=[{"name": "west", "apiServer": "https://west.example:6443"},
                            {"name": "east", "apiServer": "https://127.0.3.1:6443"}])

    def test_loopback_everywhere_is_a_local_lab_and_fine(self, tmp_path: Path, source: BundleSource) -> None:
        desired = render(tmp_path, source, leader={"apiServer": "https://127.0.1.1:6443"},
                         members=[{"name": "west", "apiServer": "https://127.0.2.1:6443"},
                                  {"name": "east", "apiServer": "https://localhost:6443"}])
        assert len(desired.resources) > 40

    def test_leader_server_defaults_to_the_kubeconfig(self, tmp_path: Path, source: BundleSource) -> None:
        kubeconfig = tmp_path / "north.yaml"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: other\n"
            "clusters:\n- name: n\n  cluster: {server: 'https://north.lan:6443'}\n"
            "- name: o\n  cluster: {server: 'https://other.lan:6443'}\n"
            "contexts:\n- name: north\n  context: {cluster: n, user: u}\n"
            "- name: other\n  context: {cluster: o}\n")
        desired = desired_fleet(make_fleet(tmp_path, leader={"apiServer": None, "kubeconfig": str(kubeconfig),
                                                             "context": "north"}), bundles=source)
        cs = on(desired, "west")[a(f"west/{MC_GROUP}/ClusterSet/kube-system/demo-set")]
        assert cs.body["spec"]["leaders"][0]["server"] == "https://north.lan:6443"

    def test_pins_from_the_fleet_are_enforced(self, tmp_path: Path) -> None:
        fleet = make_fleet(tmp_path, manifests={"mirror": str(MIRROR), "sha256": {"leader": "0" * 64}})
        with pytest.raises(BundleError, match="does not match its sha256 pin"):
            desired_fleet(fleet, bundles=BundleSource.from_environment(
                fleet.spec.manifests.mirror, fleet.spec.manifests.sha256))


def test_preflight_probes_each_members_antrea_config(tmp_path: Path, source: BundleSource) -> None:
    desired = render(tmp_path, source)
    assert [(p.cluster, p.kind, p.namespace, p.name) for p in desired.probes] == [
        ("west", "ConfigMap", "kube-system", "antrea-config"), ("east", "ConfigMap", "kube-system", "antrea-config")]
    off = {"data": {"antrea-agent.conf": "featureGates:\n  Multicluster: false\n"}}
    found = desired.probes[1].judge(off)
    assert found is not None and found.address == "east/kube-system/antrea-config"
    assert desired.probes[0].judge(None) is None
