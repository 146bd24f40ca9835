"""The OCM stack renders the genuine upstream v1.3.1 bundle into hub, spoke and acceptance resources."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from fleetplan.addrs import Address
from fleetplan.config.models import Fleet
from fleetplan.graph.building import build_graph, iter_refs
from fleetplan.stacks.bundles import BundleError, BundleSource
from fleetplan.stacks.desired import DesiredFleet, Handler, Ref, Template
from fleetplan.stacks.ocm import LAYOUT, render_ocm

MIRROR = Path(os.environ.get("FLEETPLAN_MIRROR")
              or Path(__file__).resolve().parents[4] / "shared" / "upstream")
HUB_SERVER = "https://10.1.0.1:6443"


def _kubeconfig(tmp: Path, name: str, server: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: {name}, cluster: {{server: "{server}"}}}}]
users: [{{name: u, user: {{token: not-used}}}}]
contexts: [{{name: {name}, context: {{cluster: {name}, user: u}}}}]
current-context: {name}
""")
    return path


def _fleet(tmp: Path, **extra: Any) -> Fleet:
    spec: dict[str, Any] = {
        "stack": "ocm", "version": "v1.3.1", "clusterSet": {"name": "fleet-set"},
        "leader": {"name": "hub", "kubeconfig": str(_kubeconfig(tmp, "hub", HUB_SERVER + "/"))},
        "members": [
            {"name": "west", "kubeconfig": str(_kubeconfig(tmp, "west", "https://10.1.0.2:6443")),
             "labels": {"env": "prod"}},
            {"name": "east", "kubeconfig": str(_kubeconfig(tmp, "east", "https://10.1.0.3:6443")),
             "apiServer": "https://east.example:6443"},
        ],
    }
    for key, value in extra.items():
        spec[key] = value
    return Fleet.model_validate({"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet",
                                 "metadata": {"name": "demo"}, "spec": spec})


def _render(fleet: Fleet, **pins: str) -> DesiredFleet:
    return render_ocm(fleet, BundleSource(mirror=MIRROR, pins=pins))


def _get(desired: DesiredFleet, text: str) -> Any:
    return desired.by_address()[Address.parse(text)]


def test_hub_installs_the_genuine_cluster_manager_operator_pinned_to_the_version(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path))
    crd = _get(desired, "hub/apiextensions.k8s.io/CustomResourceDefinition/-/"
                        "clustermanagers.operator.open-cluster-management.io")
    assert crd.body["spec"]["names"]["kind"] == "ClusterManager"
    deployment = _get(desired, "hub/apps/Deployment/open-cluster-management/cluster-manager")
    container = deployment.body["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "quay.io/open-cluster-management/registration-operator:v1.3.1"
    assert {"name": "AGENT_IMAGE", "value": "quay.io/open-cluster-management/registration-operator:v1.3.1"} \
        in container["env"]
    assert deployment.readiness.kind.value == "available"
    assert _get(desired, "hub/core/Namespace/-/open-cluster-management").body["metadata"]["name"] \
        == "open-cluster-management"


def test_cluster_manager_carries_the_fleets_feature_gates_and_auto_approve_users(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ocm={"clusterManager": {"featureGates": {"ManagedClusterAutoApproval": True,
                                                                       "DefaultClusterSet": False}},
                                  "autoApproveUsers": ["system:serviceaccount:ci:robot"]})
    cm = _get(_render(fleet), "hub/operator.open-cluster-management.io/ClusterManager/-/cluster-manager")
    registration = cm.body["spec"]["registrationConfiguration"]
    assert registration["featureGates"] == [{"feature": "DefaultClusterSet", "mode": "Disable"},
                                            {"feature": "ManagedClusterAutoApproval", "mode": "Enable"}]
    assert registration["autoApproveUsers"] == ["system:serviceaccount:ci:robot"]
    assert cm.body["spec"]["registrationImagePullSpec"] == \
        "quay.io/open-cluster-management/registration:v1.3.1"
    assert cm.readiness.condition_type == "Applied"


def test_each_spoke_gets_its_own_bootstrap_identity_and_short_lived_token(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path))
    for spoke in ("west", "east"):
        account = f"agent-registration-bootstrap-{spoke}"
        token = _get(desired, f"hub/fleetplan.dev/BoundToken/open-cluster-management/{account}")
        assert token.handler == Handler.BOUND_TOKEN
        assert token.options["serviceAccount"] == account
        assert token.options["ttlSeconds"] == 3600
        binding = _get(desired, f"hub/rbac.authorization.k8s.io/ClusterRoleBinding/-/"
                                f"open-cluster-management:bootstrap:{account}")
        assert binding.body["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                             "namespace": "open-cluster-management"}]
        accept = _get(desired, f"hub/fleetplan.dev/ClusterAcceptance/-/{spoke}")
        assert accept.handler == Handler.ACCEPT_CLUSTER
        assert accept.options["requesters"] == [f"system:serviceaccount:open-cluster-management:{account}"]
    assert desired.warnings == ()


def test_shared_strategy_uses_one_identity_and_warns(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path, tokens={"strategy": "shared"}))
    tokens = [r for r in desired.resources if r.handler == Handler.BOUND_TOKEN]
    assert [str(t.address) for t in tokens] == \
        ["hub/fleetplan.dev/BoundToken/open-cluster-management/agent-registration-bootstrap"]
    assert len(tokens[0].options["neededUntil"]) == 2
    assert any("shared" in w for w in desired.warnings)


def test_secret_kind_uses_an_expiring_bootstrap_token_secret_per_identity(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path, ocm={"bootstrapToken": {"kind": "secret", "ttl": "10m"}}))
    account = "agent-registration-bootstrap-west"
    token = _get(desired, f"hub/fleetplan.dev/BootstrapToken/kube-system/{account}")
    group = f"system:bootstrappers:managedcluster:{account}"
    assert token.handler == Handler.BOOTSTRAP_TOKEN
    assert token.options["ttlSeconds"] == 600 and token.options["group"] == group
    assert token.options["neededUntil"][0]["address"] == \
        "west/operator.open-cluster-management.io/Klusterlet/-/klusterlet"
    # The identity is the token's own group: no ServiceAccount, a binding to the group, and only
    # CSRs from a bootstrap token of that group are accepted.
    binding = _get(desired, "hub/rbac.authorization.k8s.io/ClusterRoleBinding/-/"
                            f"open-cluster-management:bootstrap:{account}")
    assert binding.body["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]
    assert not [r for r in desired.resources if r.address.kind == "ServiceAccount" and account in r.address.name]
    accept = _get(desired, "hub/fleetplan.dev/ClusterAcceptance/-/west")
    assert accept.options["requesters"] == [f"group:{group}"]
    kubeconfig = _get(desired, "west/core/Secret/open-cluster-management-agent/bootstrap-hub-kubeconfig")
    assert {ref.source for _, ref in kubeconfig.body["data"]["kubeconfig"].refs} == {token.address}
    assert not [r for r in desired.resources if r.handler in (Handler.BOUND_TOKEN, Handler.SECRET_TOKEN)]
    build_graph(desired.resources)  # every dependency resolves


def test_bootstrap_kubeconfig_is_built_from_refs_and_holds_no_secret(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path))
    secret = _get(desired, "west/core/Secret/open-cluster-management-agent/bootstrap-hub-kubeconfig")
    template = secret.body["data"]["kubeconfig"]
    assert isinstance(template, Template) and template.transform == "base64"
    token = Address.parse("hub/fleetplan.dev/BoundToken/open-cluster-management/"
                          "agent-registration-bootstrap-west")
    assert {ref.source for _, ref in template.refs} == {token}
    assert token in secret.depends_on  # the graph does not look inside Templates
    assert "data.kubeconfig" in secret.sensitive_paths
    values = {"ca": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(), "token": "tok.en"}
    config = YAML(typ="safe").load(template.render(values))
    assert config["clusters"][0]["cluster"] == {"server": HUB_SERVER,
                                                "certificate-authority-data": values["ca"]}
    assert config["users"][0]["user"] == {"token": "tok.en"}
    assert config["contexts"][0]["context"] == {"cluster": "hub", "user": "bootstrap"}
    assert dict(template.refs)["ca"] == Ref(token, "ca.crt", transform="base64")


def test_klusterlet_names_the_cluster_its_server_and_mode(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path, ocm={"klusterlet": {"mode": "Singleton"}}))
    west = _get(desired, "west/operator.open-cluster-management.io/Klusterlet/-/klusterlet").body["spec"]
    east = _get(desired, "east/operator.open-cluster-management.io/Klusterlet/-/klusterlet").body["spec"]
    assert west["clusterName"] == "west" and west["namespace"] == "open-cluster-management-agent"
    assert west["externalServerURLs"] == [{"url": "https://10.1.0.2:6443"}]
    assert east["externalServerURLs"] == [{"url": "https://east.example:6443"}]
    assert west["deployOption"] == {"mode": "Singleton"}
    crd = _get(desired, "west/apiextensions.k8s.io/CustomResourceDefinition/-/"
                        "klusterlets.operator.open-cluster-management.io")
    assert crd.readiness.kind.value == "established"


def test_acceptance_labels_join_the_cluster_set_and_keep_member_labels(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path, ocm={"managedClusterSetBindings": ["team-a", "team-b"]}))
    west = _get(desired, "hub/fleetplan.dev/ClusterAcceptance/-/west")
    assert west.options["labels"] == {"cluster.open-cluster-management.io/clusterset": "fleet-set",
                                      "env": "prod"}
    assert west.readiness.condition_type == "ManagedClusterJoined"
    cluster_set = _get(desired, "hub/cluster.open-cluster-management.io/ManagedClusterSet/-/fleet-set")
    assert cluster_set.body["apiVersion"] == "cluster.open-cluster-management.io/v1beta2"
    assert cluster_set.body["spec"]["clusterSelector"]["selectorType"] == "ExclusiveClusterSetLabel"
    for ns in ("team-a", "team-b"):
        binding = _get(desired, f"hub/cluster.open-cluster-management.io/ManagedClusterSetBinding/"
                                f"{ns}/fleet-set")
        assert binding.body["spec"] == {"clusterSet": "fleet-set"}


def test_destroy_order_unjoins_each_spoke_before_its_hub_objects_and_the_hub_last(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path))
    order = [str(a) for a in build_graph(desired.resources).deletion_order()]
    position = {a: i for i, a in enumerate(order)}
    cm = position["hub/operator.open-cluster-management.io/ClusterManager/-/cluster-manager"]
    for spoke in ("west", "east"):
        accept = position[f"hub/fleetplan.dev/ClusterAcceptance/-/{spoke}"]
        release = position[f"hub/fleetplan.dev/ClusterRelease/-/{spoke}"]
        on_spoke = [i for a, i in position.items() if a.startswith(spoke + "/")]
        assert accept < min(on_spoke), "the ManifestWork guard runs before anything is removed"
        assert max(on_spoke) < release < cm, "hub objects of the spoke go after the spoke, before the hub"
        klusterlet = position[f"{spoke}/operator.open-cluster-management.io/Klusterlet/-/klusterlet"]
        assert klusterlet < position[f"{spoke}/core/Namespace/-/open-cluster-management-agent"]
        assert klusterlet < position[f"{spoke}/apps/Deployment/open-cluster-management/klusterlet"]
    assert cm < position["hub/apps/Deployment/open-cluster-management/cluster-manager"]
    assert cm < position["hub/rbac.authorization.k8s.io/ClusterRoleBinding/-/cluster-manager"]


def test_creation_order_mints_the_token_before_the_spoke_and_accepts_last(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path))
    graph = build_graph(desired.resources)
    accept = Address.parse("hub/fleetplan.dev/ClusterAcceptance/-/west")
    klusterlet = Address.parse("west/operator.open-cluster-management.io/Klusterlet/-/klusterlet")
    secret = Address.parse("west/core/Secret/open-cluster-management-agent/bootstrap-hub-kubeconfig")
    assert {klusterlet, secret} <= graph.ancestors(accept)
    assert secret in graph.ancestors(klusterlet)


def test_prevent_destroy_leader_protects_every_hub_resource(tmp_path: Path) -> None:
    desired = _render(_fleet(tmp_path, lifecycle={"preventDestroy": ["leader"]}))
    assert all(r.prevent_destroy == (r.address.cluster == "hub") for r in desired.resources)


def test_no_body_holds_a_literal_secret(tmp_path: Path) -> None:
    for resource in _render(_fleet(tmp_path)).resources:
        assert "not-used" not in repr(resource.body)  # the kubeconfigs' own credentials
        if list(iter_refs(resource.body)):  # tokens and CAs travel only into the sensitive kubeconfig
            assert resource.address.name == "bootstrap-hub-kubeconfig"
            assert resource.sensitive_paths == frozenset({"data.kubeconfig"})


def test_a_wrong_pin_stops_rendering(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not match its sha256 pin"):
        _render(_fleet(tmp_path), hub="0" * 64)


def test_release_urls_point_at_the_upstream_files() -> None:
    assert LAYOUT.url("v1.3.1", "hub/operator.yaml") == ("https://raw.githubusercontent.com/"
        "open-cluster-management-io/ocm/v1.3.1/deploy/cluster-manager/config/operator/operator.yaml")
    crd = "0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml"
    assert LAYOUT.url("v1.3.1", f"crds/{crd}").endswith(f"/api/v1.3.0/cluster/v1beta2/{crd}")
