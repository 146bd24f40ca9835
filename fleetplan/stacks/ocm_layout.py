"""Names, the manifest layout and address helpers of the OCM stack (`stacks.ocm` renders with them).

Kept apart so that the renderer stays one screenful per part, and so that the lab's simulators and
the tests can use the layout and names without the renderer. Pure: the only file read is a
kubeconfig, for its server URL (`kubeconfig_server`); no credential in it is read or kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fleetplan.addrs import Address
from fleetplan.config.models import ClusterRef
from fleetplan.errors import ConfigError
from fleetplan.stacks.bundles import BundleLayout
from fleetplan.stacks.desired import Ref, Template

HUB_NAMESPACE = "open-cluster-management"
AGENT_NAMESPACE = "open-cluster-management-agent"
TOKEN_NAMESPACE = "kube-system"
BOOTSTRAP_SA = "agent-registration-bootstrap"
BOOTSTRAP_ROLE = "open-cluster-management:bootstrap"
BOOTSTRAP_SECRET = "bootstrap-hub-kubeconfig"
CLUSTER_SET_LABEL = "cluster.open-cluster-management.io/clusterset"
CSR_CLUSTER_LABEL = "open-cluster-management.io/cluster-name"
REGISTRY = "quay.io/open-cluster-management"
FLEETPLAN_GROUP = "fleetplan.dev"
CLUSTER_GROUP = "cluster.open-cluster-management.io"
OPERATOR_GROUP = "operator.open-cluster-management.io"
RBAC = "rbac.authorization.k8s.io"

_CRDS = "crds/0000_0{}_{}.open-cluster-management.io_{}.crd.yaml"


class OcmLayout(BundleLayout):
    """OCM publishes no plain-YAML release assets; each mirror file maps to its upstream path at
    the tag (operator files from `ocm`, CRDs from `api` at the version ocm's go.mod requires)."""

    def url(self, version: str, file: str) -> str:
        if file.startswith("crds/"):
            kind = file.rsplit("_", 1)[1].split(".", 1)[0]
            return (f"{_RAW}/api/{_API_TAGS.get(version, version)}/{_API_FOLDERS[kind]}/"
                    f"{file.removeprefix('crds/')}")
        role, name = file.split("/", 1)
        chart = "cluster-manager" if role == "hub" else "klusterlet"
        sub = "rbac" if name.startswith("cluster_role") else "operator"
        return f"{_RAW}/ocm/{version}/deploy/{chart}/config/{sub}/{name}"


_RAW = "https://raw.githubusercontent.com/open-cluster-management-io"
_API_FOLDERS = {"managedclusters": "cluster/v1", "managedclustersets": "cluster/v1beta2",
                "managedclustersetbindings": "cluster/v1beta2", "klusterlets": "operator/v1",
                "clustermanagers": "operator/v1", "manifestworks": "work/v1"}
_API_TAGS = {"v1.3.1": "v1.3.0"}

LAYOUT = OcmLayout(
    stack="ocm",
    files={
        "hub": (_CRDS.format(1, "operator", "clustermanagers"), "hub/namespace.yaml",
                "hub/service_account.yaml", "hub/cluster_role.yaml", "hub/cluster_role_binding.yaml",
                "hub/operator.yaml"),
        "spoke": (_CRDS.format(0, "operator", "klusterlets"), "spoke/namespace.yaml",
                  "spoke/service_account.yaml", "spoke/cluster_role.yaml",
                  "spoke/cluster_role_binding.yaml", "spoke/operator.yaml"),
        # What the cluster-manager operator installs on the hub; only the lab's simulator uses it.
        "hub-crds": (_CRDS.format(0, "clusters", "managedclusters"),
                     _CRDS.format(0, "clusters", "managedclustersets"),
                     _CRDS.format(1, "clusters", "managedclustersetbindings"),
                     _CRDS.format(0, "work", "manifestworks")),
    },
    upstream_namespace={"hub": HUB_NAMESPACE, "spoke": HUB_NAMESPACE, "hub-crds": ""},
    release_url="",
)

# The bootstrap identity's permissions, as the cluster-manager chart grants them: enough to
# create its ManagedCluster and CSR, read cluster-info and join a cluster set, nothing more.
BOOTSTRAP_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
     "verbs": ["create", "get", "list", "watch"]},
    {"apiGroups": [CLUSTER_GROUP], "resources": ["managedclusters"],
     "verbs": ["get", "create", "list", "watch"]},
    {"apiGroups": [CLUSTER_GROUP], "resources": ["managedclustersets/join"], "verbs": ["create"]},
)


def token_address(hub: str, account: str, kind: str) -> Address:
    if kind == "secret":
        return Address(hub, FLEETPLAN_GROUP, "BootstrapToken", TOKEN_NAMESPACE, account)
    return Address(hub, FLEETPLAN_GROUP, "BoundToken", HUB_NAMESPACE, account)


def acceptance_address(hub: str, spoke: str) -> Address:
    return Address(hub, FLEETPLAN_GROUP, "ClusterAcceptance", "", spoke)


def klusterlet_address(spoke: str) -> Address:
    return Address(spoke, OPERATOR_GROUP, "Klusterlet", "", "klusterlet")


def bootstrap_kubeconfig(server: str, token: Address) -> Template:
    """The kubeconfig the registration agent bootstraps with: the hub's server, the CA the engine
    verified when it minted the token, and the token; base64 for Secret.data."""
    text = "\n".join([
        "apiVersion: v1", "kind: Config",
        "clusters:", "- name: hub", "  cluster:", f"    server: {server}",
        "    certificate-authority-data: ${ca}",
        "users:", "- name: bootstrap", "  user:", "    token: ${token}",
        "contexts:", "- name: bootstrap", "  context:", "    cluster: hub", "    user: bootstrap",
        "current-context: bootstrap", ""])
    return Template(text, (("ca", Ref(token, "ca.crt", transform="base64")),
                           ("token", Ref(token, "token"))), transform="base64")


def kubeconfig_server(cluster: ClusterRef) -> str:
    """The server URL of the cluster's kubeconfig context (no credentials are read or kept)."""
    path: Path = cluster.kubeconfig
    try:
        config = YAML(typ="safe").load(path.read_text())
    except (OSError, YAMLError) as err:
        raise ConfigError(f"cannot read the kubeconfig of {cluster.name} ({path}): "
                          f"{str(err).splitlines()[0]}",
                          hint=f"fix the file or set apiServer for {cluster.name}") from None
    config = config if isinstance(config, dict) else {}
    context_name = cluster.context or config.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    context = contexts.get(context_name)
    server = clusters.get((context or {}).get("cluster"), {}).get("server")
    if not isinstance(server, str) or not server:
        raise ConfigError(f"kubeconfig {path} has no server for context {context_name!r} "
                          f"(cluster {cluster.name})",
                          hint=f"name an existing context or set apiServer for {cluster.name}")
    return server.rstrip("/")


def bootstrap_binding(account: str) -> str:
    return f"open-cluster-management:bootstrap:{account}"


def bootstrap_username(account: str) -> str:
    """The user a bootstrap ServiceAccount's token authenticates as (what CSRs record)."""
    return f"system:serviceaccount:{HUB_NAMESPACE}:{account}"


def bootstrap_group(account: str) -> str:
    """The group a bootstrap-token Secret of `account` grants (its `auth-extra-groups`)."""
    return f"system:bootstrappers:managedcluster:{account}"


def bootstrap_requester(account: str, kind: str) -> str:
    """Who may request a spoke's certificate, as `ocm_accept.judge_csrs` reads it."""
    return f"group:{bootstrap_group(account)}" if kind == "secret" else bootstrap_username(account)
