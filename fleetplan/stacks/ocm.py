"""The Open Cluster Management stack: a Fleet becomes the hub, its spokes and their acceptance.

What `clusteradm init / join / accept / clusterset` do by hand, as desired resources:

- Hub (the fleet's leader): namespace `open-cluster-management`, the cluster-manager operator from
  the `hub` bundle, the `ClusterManager` CR with the fleet's options, the bootstrap ClusterRole,
  one bootstrap ServiceAccount per spoke (or one shared, when `tokens.strategy: shared`) with its
  binding and token, the ManagedClusterSet and its bindings.
- Spoke: the `spoke` bundle (Klusterlet CRD, operator, namespace `open-cluster-management`), the
  agent namespace, Secret `bootstrap-hub-kubeconfig` (a kubeconfig built at apply time from the
  token and the hub CA the engine verified; see `Template`), and the `Klusterlet` CR.
- Per spoke on the hub: the `ManagedCluster` (handler ACCEPT_CLUSTER: wait for the agent's
  ManagedCluster and CSR, approve only the spoke's bootstrap identity, accept, label) and a
  `ClusterRelease` (handler RELEASE_CLUSTER) that every spoke resource depends on, so that destroy
  unjoins the spoke first and only then removes its CSRs, ManagedCluster and hub namespace.

Invariants: pure (reads only the bundle and the kubeconfig files the fleet names, for server
URLs; never a cluster); no secret value appears in any body (tokens and CAs are `Ref`s); every
spoke resource depends on its ClusterRelease, which depends on the ClusterManager, so destroy
removes spokes (in parallel) before the hub.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from fleetplan.addrs import Address
from fleetplan.config.models import ClusterRef, Fleet
from fleetplan.errors import ConfigError
from fleetplan.stacks.bundles import (
    BundleSource,
    RenderOptions,
    address_of,
    pinned_image,
    render_objects,
)
from fleetplan.stacks.desired import (
    DesiredFleet,
    DesiredResource,
    Handler,
    Readiness,
    ReadinessKind,
)
from fleetplan.stacks.ocm_layout import (
    AGENT_NAMESPACE,
    BOOTSTRAP_ROLE,
    BOOTSTRAP_RULES,
    BOOTSTRAP_SA,
    BOOTSTRAP_SECRET,
    CLUSTER_GROUP,
    CLUSTER_SET_LABEL,
    FLEETPLAN_GROUP,
    HUB_NAMESPACE,
    LAYOUT,
    OPERATOR_GROUP,
    RBAC,
    REGISTRY,
    TOKEN_NAMESPACE,
    acceptance_address,
    bootstrap_binding,
    bootstrap_group,
    bootstrap_kubeconfig,
    bootstrap_requester,
    klusterlet_address,
    kubeconfig_server,
    token_address,
)

__all__ = ["LAYOUT", "render_ocm"]

def render_ocm(fleet: Fleet, source: BundleSource | None = None) -> DesiredFleet:
    """The desired resources of an OCM fleet; raises ConfigError/BundleError on bad input."""
    spec = fleet.spec
    if fleet.is_member_only:
        raise ConfigError("the ocm stack needs the hub's kubeconfig; leader.joinConfig is not "
                          "supported for ocm yet", hint="set leader.kubeconfig/context instead")
    if source is None:
        source = BundleSource.from_environment(spec.manifests.mirror, spec.manifests.sha256)
    hub_ref, spokes = fleet.clusters()[0], fleet.clusters()[1:]
    protected = _protected_clusters(fleet)
    resources: list[DesiredResource] = []
    warnings: list[str] = []
    hub = _render_hub(fleet, hub_ref, source.load(LAYOUT, spec.version, "hub"))
    resources.extend(hub)
    cluster_manager = Address(hub_ref.name, OPERATOR_GROUP, "ClusterManager", "", "cluster-manager")
    resources.extend(_render_cluster_set(fleet, hub_ref.name, cluster_manager))
    if spokes and spec.tokens.strategy == "shared":
        warnings.append("tokens.strategy shared: every spoke bootstraps as one identity, so acceptance "
                        "cannot tell a spoke from another one claiming its name")
        resources.extend(_bootstrap_identity(fleet, hub_ref, BOOTSTRAP_SA, [s.name for s in spokes]))
    spoke_bundle = source.load(LAYOUT, spec.version, "spoke") if spokes else None
    server = hub_ref.api_server or kubeconfig_server(hub_ref)
    for spoke in spokes:
        assert spoke_bundle is not None
        account = BOOTSTRAP_SA if spec.tokens.strategy == "shared" else f"{BOOTSTRAP_SA}-{spoke.name}"
        if spec.tokens.strategy != "shared":
            resources.extend(_bootstrap_identity(fleet, hub_ref, account, [spoke.name]))
        resources.extend(_render_spoke(fleet, hub_ref.name, spoke, spoke_bundle, server, account,
                                       cluster_manager))
    final = tuple(_protect(r, protected) for r in resources)
    return DesiredFleet(fleet.name, final, tuple(warnings))


def _render_hub(fleet: Fleet, hub: ClusterRef, bundle: Any) -> list[DesiredResource]:
    version = fleet.spec.version
    objects = render_objects(bundle.fresh_objects(), RenderOptions(version=version))
    out: list[DesiredResource] = []
    for obj in objects:
        _pin_agent_image_env(obj, version)
        out.append(DesiredResource(address_of(hub.name, obj), obj,
                                   readiness=_bundle_readiness(obj, hub.name)))
    # The CR depends on the whole operator (not just its Deployment) so that destroy deletes the
    # CR while the operator still has the permissions it needs to finalize it.
    operator = frozenset(r.address for r in out)
    gates = fleet.spec.ocm.cluster_manager.feature_gates
    registration: dict[str, Any] = {}
    if gates:
        registration["featureGates"] = [{"feature": name, "mode": "Enable" if on else "Disable"}
                                        for name, on in sorted(gates.items())]
    if fleet.spec.ocm.auto_approve_users:
        registration["autoApproveUsers"] = sorted(fleet.spec.ocm.auto_approve_users)
    body: dict[str, Any] = {
        "apiVersion": f"{OPERATOR_GROUP}/v1", "kind": "ClusterManager",
        "metadata": {"name": "cluster-manager"},
        "spec": {**_images(version, ("registration", "work", "placement", "addon-manager"),
                           {"addon-manager": "addOnManager"}),
                 "deployOption": {"mode": "Default"}},
    }
    if registration:
        body["spec"]["registrationConfiguration"] = registration
    cm = Address(hub.name, OPERATOR_GROUP, "ClusterManager", "", "cluster-manager")
    out.append(DesiredResource(
        cm, body, depends_on=operator,
        readiness=Readiness(ReadinessKind.CONDITION, "Applied",
                            description=f"ClusterManager Applied on hub {hub.name}")))
    out.append(DesiredResource(
        Address(hub.name, RBAC, "ClusterRole", "", BOOTSTRAP_ROLE),
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": BOOTSTRAP_ROLE},
         "rules": [dict(rule) for rule in BOOTSTRAP_RULES]}))
    return out


def _images(version: str, names: Sequence[str], fields: Mapping[str, str]) -> dict[str, str]:
    return {f"{fields.get(n, n)}ImagePullSpec": f"{REGISTRY}/{n}:{version}" for n in names}


def _pin_agent_image_env(obj: dict[str, Any], version: str) -> None:
    """The operator passes AGENT_IMAGE to what it deploys; pin it like the container image."""
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    for container in containers:
        for env in container.get("env") or []:
            if env.get("name") == "AGENT_IMAGE" and isinstance(env.get("value"), str):
                env["value"] = pinned_image(env["value"], RenderOptions(version=version))


def _bundle_readiness(obj: Mapping[str, Any], cluster: str) -> Readiness:
    name = obj["metadata"]["name"]
    if obj["kind"] == "CustomResourceDefinition":
        return Readiness(ReadinessKind.ESTABLISHED, description=f"CRD {name} Established on {cluster}")
    if obj["kind"] == "Deployment":
        return Readiness(ReadinessKind.AVAILABLE, description=f"Deployment {name} available on {cluster}")
    return Readiness()


def _bootstrap_identity(fleet: Fleet, hub: ClusterRef, account: str,
                        spokes: Sequence[str]) -> list[DesiredResource]:
    """The bootstrap identity on the hub: ClusterRoleBinding and token, plus its ServiceAccount
    (bound tokens) or its own group (bootstrap-token Secrets)."""
    binding_name = bootstrap_binding(account)
    secret_kind = fleet.spec.ocm.bootstrap_token.kind == "secret"
    subject = ({"kind": "Group", "apiGroup": RBAC, "name": bootstrap_group(account)} if secret_kind
               else {"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE})
    binding = DesiredResource(
        Address(hub.name, RBAC, "ClusterRoleBinding", "", binding_name),
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding_name},
         "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": BOOTSTRAP_ROLE}, "subjects": [subject]})
    token = _token(fleet, hub, account, spokes)
    if secret_kind:
        return [binding, token]
    account_body = {"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": HUB_NAMESPACE}}
    sa = Address(hub.name, "", "ServiceAccount", HUB_NAMESPACE, account)
    return [DesiredResource(sa, account_body), binding, token]


def _token(fleet: Fleet, hub: ClusterRef, account: str, spokes: Sequence[str]) -> DesiredResource:
    """Minted at apply time, never stored. A bootstrap token only matters until the spoke holds its
    signed certificate, so rotation is planned only while a spoke has not joined (docs/ocm.md)."""
    settings = fleet.spec.ocm.bootstrap_token
    address = token_address(hub.name, account, settings.kind)
    options: dict[str, Any] = {
        "caSha256": hub.ca_sha256, "ttlSeconds": settings.ttl_seconds,
        "rotateBeforeSeconds": min(fleet.spec.tokens.rotate_before_seconds, settings.ttl_seconds // 4),
        # The klusterlet reports HubConnectionDegraded=False once its agent holds a working hub
        # kubeconfig from its signed certificate.
        "neededUntil": [{"address": str(klusterlet_address(name)), "apiVersion": f"{OPERATOR_GROUP}/v1",
                         "condition": "HubConnectionDegraded", "status": "False"} for name in spokes]}
    if settings.kind == "secret":
        options.update({"group": bootstrap_group(account), "fleet": fleet.name})
        return DesiredResource(address, {"identity": account, "namespace": TOKEN_NAMESPACE},
                               handler=Handler.BOOTSTRAP_TOKEN, options=options)
    options["serviceAccount"] = account
    return DesiredResource(address, {"serviceAccount": account, "namespace": HUB_NAMESPACE},
                           handler=Handler.BOUND_TOKEN, options=options)


def _render_spoke(fleet: Fleet, hub: str, spoke: ClusterRef, bundle: Any, server: str, account: str,
                  cluster_manager: Address) -> list[DesiredResource]:
    version, mode = fleet.spec.version, fleet.spec.ocm.klusterlet.mode
    release = Address(hub, FLEETPLAN_GROUP, "ClusterRelease", "", spoke.name)
    on_spoke: list[DesiredResource] = []
    for obj in render_objects(bundle.fresh_objects(), RenderOptions(version=version)):
        on_spoke.append(DesiredResource(address_of(spoke.name, obj), obj,
                                        readiness=_bundle_readiness(obj, spoke.name)))
    agent_ns = Address(spoke.name, "", "Namespace", "", AGENT_NAMESPACE)
    on_spoke.append(DesiredResource(agent_ns, {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": AGENT_NAMESPACE}}))
    token = token_address(hub, account, fleet.spec.ocm.bootstrap_token.kind)
    secret = Address(spoke.name, "", "Secret", AGENT_NAMESPACE, BOOTSTRAP_SECRET)
    on_spoke.append(DesiredResource(
        secret,
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": BOOTSTRAP_SECRET, "namespace": AGENT_NAMESPACE},
         "data": {"kubeconfig": bootstrap_kubeconfig(server, token)}},
        depends_on=frozenset({token}), sensitive_paths=frozenset({"data.kubeconfig"})))
    klusterlet_spec: dict[str, Any] = {
        "clusterName": spoke.name, "namespace": AGENT_NAMESPACE, "deployOption": {"mode": mode},
        **_images(version, ("registration", "work"), {}),
        "imagePullSpec": f"{REGISTRY}/registration-operator:{version}",
    }
    external = spoke.api_server or kubeconfig_server(spoke)
    klusterlet_spec["externalServerURLs"] = [{"url": external}]
    klusterlet = klusterlet_address(spoke.name)
    on_spoke.append(DesiredResource(
        klusterlet, {"apiVersion": f"{OPERATOR_GROUP}/v1", "kind": "Klusterlet",
                     "metadata": {"name": "klusterlet"}, "spec": klusterlet_spec},
        # On everything else on the spoke: destroy removes the Klusterlet first, while its
        # operator still runs with its permissions and can finalize it.
        depends_on=frozenset(r.address for r in on_spoke)))
    # Every spoke resource waits for the release marker, so destroy deletes the marker (and the
    # hub-side objects of the spoke) only after the spoke has been unjoined.
    on_spoke = [_with_dependency(r, release) for r in on_spoke]
    labels = {**spoke.labels, CLUSTER_SET_LABEL: fleet.spec.cluster_set.name}
    # An operation, not an object: the ManagedCluster is the agent's; fleetplan approves its CSR
    # and sets hubAcceptsClient and these labels (server-side apply of those fields only).
    accept = DesiredResource(
        acceptance_address(hub, spoke.name),
        {"apiVersion": f"{CLUSTER_GROUP}/v1", "kind": "ManagedCluster",
         "metadata": {"name": spoke.name, "labels": labels}, "spec": {"hubAcceptsClient": True}},
        handler=Handler.ACCEPT_CLUSTER,
        depends_on=frozenset({r.address for r in on_spoke}
                             | {Address(hub, CLUSTER_GROUP, "ManagedClusterSet", "",
                                        fleet.spec.cluster_set.name)}),
        readiness=Readiness(ReadinessKind.CONDITION, "ManagedClusterJoined",
                            description=f"ManagedCluster {spoke.name} joined hub {hub}"),
        options={"clusterName": spoke.name, "labels": dict(sorted(labels.items())),
                 "requesters": [bootstrap_requester(account, fleet.spec.ocm.bootstrap_token.kind)],
                 "timeoutSeconds": fleet.spec.wait.timeout_seconds})
    marker = DesiredResource(release, {"clusterName": spoke.name}, handler=Handler.RELEASE_CLUSTER,
                             depends_on=frozenset({
                                 cluster_manager, token,
                                 Address(hub, RBAC, "ClusterRole", "", BOOTSTRAP_ROLE),
                                 Address(hub, RBAC, "ClusterRoleBinding", "", bootstrap_binding(account))}),
                             options={"clusterName": spoke.name})
    return [marker, *on_spoke, accept]


def _render_cluster_set(fleet: Fleet, hub: str, cluster_manager: Address) -> list[DesiredResource]:
    name = fleet.spec.cluster_set.name
    cluster_set = Address(hub, CLUSTER_GROUP, "ManagedClusterSet", "", name)
    out = [DesiredResource(cluster_set, {
        "apiVersion": f"{CLUSTER_GROUP}/v1beta2", "kind": "ManagedClusterSet", "metadata": {"name": name},
        "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}},
        depends_on=frozenset({cluster_manager}))]
    for namespace in fleet.spec.ocm.managed_cluster_set_bindings:
        out.append(DesiredResource(
            Address(hub, CLUSTER_GROUP, "ManagedClusterSetBinding", namespace, name),
            {"apiVersion": f"{CLUSTER_GROUP}/v1beta2", "kind": "ManagedClusterSetBinding",
             "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterSet": name}},
            depends_on=frozenset({cluster_set})))
    return out


def _with_dependency(resource: DesiredResource, dependency: Address) -> DesiredResource:
    return dataclasses.replace(resource, depends_on=resource.depends_on | {dependency})


def _protected_clusters(fleet: Fleet) -> frozenset[str]:
    names: set[str] = set()
    for entry in fleet.spec.lifecycle.prevent_destroy:
        if entry == "leader":
            names.add(fleet.leader_name)
        elif entry == "members":
            names.update(m.name for m in fleet.spec.members)
        else:
            names.add(entry)
    return frozenset(names)


def _protect(resource: DesiredResource, protected: frozenset[str]) -> DesiredResource:
    if resource.address.cluster not in protected:
        return resource
    return dataclasses.replace(resource, prevent_destroy=True)
