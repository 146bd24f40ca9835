"""The Antrea Multi-cluster stack: Fleet -> desired resources (what `antctl mc deploy/init/create
membertoken/join` do by hand, as one graph).

Leader (cluster ID = `spec.leader.name`, namespace = `spec.clusterSet.namespace`): the Namespace
(the upstream manifest has none), the leader bundle rendered into it, the ClusterSet v1alpha2 named
after the ClusterSet ID, and per member a ServiceAccount (annotated with the member's cluster ID,
which the leader's webhook checks since the per-member token change), a RoleBinding to
`antrea-mc-member-cluster-role` and a token (`tokens.kind`: `bound` TokenRequest or `secret`
service-account token Secret). Member: the member bundle in `spec.antrea.memberNamespace`, an
Opaque token Secret (`ca.crt`, `namespace`, `token`) whose values are `Ref`s to the leader's token
(or, in a member-only fleet, literals from the join file), and the member ClusterSet, which apply
waits on until its `Ready` condition is True.

Ordering comes from the graph's implicit edges plus the explicit ones here: ClusterSets after the
validating webhook that guards them answers and the controller that serves it (so, in reverse,
they are deleted while it still answers); the leader's ClusterSet after every CRD of its bundle;
member ClusterSets after the leader's (so destroy makes members leave before the leader goes);
tokens after their ServiceAccount and RoleBinding and before the member Secrets that carry them.
Teardown guards (leader ClusterSet refuses while announces remain; a member's token is revoked
after it left) are the handlers in fleetplan/live/antrea_handlers.py.

Pure: no cluster access. The only I/O is reading manifest bundles (`bundles`), the join file and,
when `leader.apiServer` is unset, the leader kubeconfig's server.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from fleetplan.addrs import Address
from fleetplan.config.models import Fleet
from fleetplan.errors import ConfigError
from fleetplan.stacks.antrea_preflight import kubeconfig_server, multicluster_gate_warning, preflight
from fleetplan.stacks.bundles import (
    BundleLayout,
    BundleSource,
    RenderOptions,
    address_of,
    render_objects,
)
from fleetplan.stacks.desired import (
    DesiredFleet,
    DesiredResource,
    Handler,
    Probe,
    Readiness,
    ReadinessKind,
    Ref,
)
from fleetplan.stacks.joinconfigs import JoinConfig, read_join_config

ANTREA_LAYOUT = BundleLayout(
    stack="antrea",
    files={"leader": ("antrea-multicluster-leader.yml",), "member": ("antrea-multicluster-member.yml",)},
    upstream_namespace={"leader": "antrea-multicluster", "member": "kube-system"},
    release_url="https://github.com/antrea-io/antrea/releases/download/{version}/{file}",
)
MC_GROUP = "multicluster.crd.antrea.io"
CLUSTERSET_API = f"{MC_GROUP}/v1alpha2"
CLUSTER_ID_ANNOTATION = "multicluster.antrea.io/cluster-id"
MEMBER_ROLE = "antrea-mc-member-cluster-role"
CONTROLLER_IMAGE = "antrea/antrea-mc-controller"
TOKEN_GROUP = "fleetplan.dev"  # addresses of things that are not stored objects
BOUND_TOKEN_KIND = "BoundToken"
SHARED_TOKEN_NAME = "member-shared-token"
_RBAC = "rbac.authorization.k8s.io"


def token_name(member: str, shared: bool = False) -> str:
    """Name of a member's ServiceAccount, RoleBinding and token on the leader, and of its copy."""
    return SHARED_TOKEN_NAME if shared else f"member-{member}-token"


def desired_fleet(fleet: Fleet, *, bundles: BundleSource | None = None,
                  leader_server: str | None = None) -> DesiredFleet:
    """Everything the fleet wants, or ConfigError with every preflight error found.

    `leader_server` overrides discovery of the leader's API server (the engine may know it
    already); otherwise `leader.apiServer`, then the leader kubeconfig's server."""
    spec = fleet.spec
    source = bundles or BundleSource.from_environment(spec.manifests.mirror, spec.manifests.sha256)
    join = read_join_config(spec.leader.join_config) if spec.leader.join_config else None
    server = _leader_server(fleet, join, leader_server)
    diagnostics = preflight(fleet, server, join)
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        raise ConfigError(errors)
    resources: list[DesiredResource] = []
    if join is None:
        resources += _leader_resources(fleet, source)
    leader_id = join.leader_cluster_id if join else fleet.leader_name
    leader_ns = join.leader_namespace if join else spec.cluster_set.namespace
    set_id = join.cluster_set_id if join else spec.cluster_set.name
    for member in spec.members:
        resources += _member_resources(fleet, source, member.name, leader_id, leader_ns, set_id,
                                       server, join)
    warnings = tuple(d for d in diagnostics if d.severity == "warning")
    probes = tuple(Probe(m.name, "v1", "ConfigMap", "kube-system", "antrea-config",
                         partial(multicluster_gate_warning, m.name)) for m in spec.members)
    return DesiredFleet(fleet.name, tuple(resources), diagnostics=warnings, probes=probes)


def leader_server(fleet: Fleet) -> str:
    """How members reach the leader: `leader.apiServer`, else the leader kubeconfig's server
    (or the join file's, in a member-only fleet)."""
    join = read_join_config(fleet.spec.leader.join_config) if fleet.spec.leader.join_config else None
    return _leader_server(fleet, join, None)


def _leader_server(fleet: Fleet, join: JoinConfig | None, given: str | None) -> str:
    if join is not None:
        return join.leader_api_server
    lead = fleet.spec.leader
    server = given or lead.api_server
    if server is None:
        ref = next(c for c in fleet.clusters() if c.role == "leader")
        server = kubeconfig_server(ref.kubeconfig, ref.context)
    if not server:
        raise ConfigError("cannot tell how members reach the leader's API server",
                          address="spec.leader.apiServer",
                          hint="set spec.leader.apiServer, e.g. https://north.example:6443")
    return server.rstrip("/")


def _protected(fleet: Fleet, cluster: str, role: str) -> bool:
    marks = set(fleet.spec.lifecycle.prevent_destroy)
    return cluster in marks or (role == "leader" and "leader" in marks) or (
        role == "member" and "members" in marks)


def bundle_resources(cluster: str, objects: Sequence[Mapping[str, Any]], *, protect: bool,
                     webhook_ready: bool = True) -> list[DesiredResource]:
    """Desired resources for rendered bundle objects, with the readiness each kind needs."""
    out = []
    for obj in objects:
        kind = obj["kind"]
        readiness = Readiness()
        if kind == "CustomResourceDefinition":
            readiness = Readiness(ReadinessKind.ESTABLISHED, description=f"CRD {obj['metadata']['name']} "
                                  f"Established on {cluster}")
        elif kind == "Deployment":
            readiness = Readiness(ReadinessKind.AVAILABLE, description=f"Deployment "
                                  f"{obj['metadata']['name']} available on {cluster}")
        elif kind == "ValidatingWebhookConfiguration" and webhook_ready and obj.get("webhooks"):
            readiness = Readiness(ReadinessKind.WEBHOOK, description=f"admission webhooks of "
                                  f"{obj['metadata']['name']} answering on {cluster}")
        out.append(DesiredResource(address_of(cluster, obj), obj, readiness=readiness,
                                   prevent_destroy=protect))
    return out


def _controller(resources: Sequence[DesiredResource]) -> frozenset[Address]:
    """The validating webhook configuration and what serves it (Deployment, Service).

    A ClusterSet write passes through that webhook, so the ClusterSet is created after all three
    and, in reverse, deleted while the controller still answers (failurePolicy is Fail)."""
    kinds = ("ValidatingWebhookConfiguration", "Deployment", "Service")
    return frozenset(r.address for r in resources if r.address.kind in kinds)


def _leader_resources(fleet: Fleet, source: BundleSource) -> list[DesiredResource]:
    spec = fleet.spec
    leader, ns = fleet.leader_name, spec.cluster_set.namespace
    protect = _protected(fleet, leader, "leader")
    out = [DesiredResource(Address(leader, "", "Namespace", "", ns),
                           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                           prevent_destroy=protect)]
    bundle = source.load(ANTREA_LAYOUT, spec.version, "leader")
    images = {CONTROLLER_IMAGE: spec.antrea.images.leader} if spec.antrea.images.leader else {}
    objects = render_objects(bundle.objects, RenderOptions(
        spec.version, ANTREA_LAYOUT.upstream_namespace["leader"], ns, images))
    out += bundle_resources(leader, objects, protect=protect)
    out.append(DesiredResource(
        Address(leader, MC_GROUP, "ClusterSet", ns, spec.cluster_set.name),
        {"apiVersion": CLUSTERSET_API, "kind": "ClusterSet",
         "metadata": {"name": spec.cluster_set.name, "namespace": ns},
         "spec": {"clusterID": leader, "leaders": [{"clusterID": leader}], "namespace": ns}},
        handler=Handler.ANTREA_LEADER_CLUSTERSET,
        # After every CRD of the bundle too: in reverse, the MemberClusterAnnounce CRD (and with it
        # every announce) must outlive the ClusterSet's check that no member is still joined.
        depends_on=_controller(out) | {r.address for r in out if r.address.kind == "CustomResourceDefinition"},
        prevent_destroy=protect,
        # Destroying the leader's ClusterSet while members still announce strands them.
        options={"refuseDeleteWhileExist": {"group": MC_GROUP, "kind": "MemberClusterAnnounce",
                                            "namespace": ns}}))
    shared = spec.tokens.strategy == "shared"
    names = [SHARED_TOKEN_NAME] if shared and spec.members else [m.name for m in spec.members]
    for member in names:
        out += _token_resources(fleet, member, shared, protect)
    for member in spec.antrea.join_members:
        out += _join_member_resources(fleet, member, protect)
    return out


def _join_member_resources(fleet: Fleet, member: str, protect: bool) -> list[DesiredResource]:
    """A member run by another team: its identity on the leader, but no token minted here.

    A bound token would be minted and thrown away (nothing in this fleet consumes it), so it is
    minted by `join-config export` instead, which writes it into the join file. A `secret` token is
    long-lived and read back by the export, so the leader's plan keeps it."""
    account, binding, _ = _token_resources(fleet, member, False, protect)
    if fleet.spec.tokens.kind == "bound":
        return [account, binding]
    # Removing a join member revokes at once: its team may still be joined, which is the point.
    return [account, binding, _token(fleet, token_name(member), {CLUSTER_ID_ANNOTATION: member}, protect)]


def _token_resources(fleet: Fleet, member: str, shared: bool, protect: bool) -> list[DesiredResource]:
    spec = fleet.spec
    leader, ns = fleet.leader_name, spec.cluster_set.namespace
    name = token_name(member, shared)
    annotations = {} if shared else {CLUSTER_ID_ANNOTATION: member}
    account = DesiredResource(Address(leader, "", "ServiceAccount", ns, name), {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations)}},
        prevent_destroy=protect)
    binding = DesiredResource(Address(leader, _RBAC, "RoleBinding", ns, name), {
        "apiVersion": f"{_RBAC}/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations)},
        "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": MEMBER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
        prevent_destroy=protect)
    token = _token(fleet, name, annotations, protect, waits_for_leave=not shared)
    # Explicit: the graph's implicit ServiceAccount edge knows only the generic token handlers. After
    # the binding too, so a delivered token works at once (and is revoked before its binding goes).
    return [account, binding, replace(token, depends_on=token.depends_on | {account.address, binding.address})]


def token_address(fleet: Fleet, name: str) -> Address:
    ns = fleet.spec.cluster_set.namespace
    if fleet.spec.tokens.kind == "bound":
        return Address(fleet.leader_name, TOKEN_GROUP, BOUND_TOKEN_KIND, ns, name)
    return Address(fleet.leader_name, "", "Secret", ns, name)


def _token(fleet: Fleet, name: str, annotations: Mapping[str, str], protect: bool,
           waits_for_leave: bool = False) -> DesiredResource:
    """The member's token; `waits_for_leave`: its removal waits for the member to leave first."""
    tokens = fleet.spec.tokens
    ns = fleet.spec.cluster_set.namespace
    address = token_address(fleet, name)
    if tokens.kind == "bound":
        return DesiredResource(address, {
            "apiVersion": f"{TOKEN_GROUP}/v1alpha1", "kind": BOUND_TOKEN_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"serviceAccount": name, "expirationSeconds": tokens.ttl_seconds}},
            handler=Handler.ANTREA_MEMBER_BOUND_TOKEN if waits_for_leave else Handler.BOUND_TOKEN,
            prevent_destroy=protect,
            options={"serviceAccount": name, "ttlSeconds": tokens.ttl_seconds,
                     "rotateBeforeSeconds": tokens.rotate_before_seconds})
    return DesiredResource(address, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"kubernetes.io/service-account.name": name, **annotations}}},
        handler=Handler.ANTREA_MEMBER_SECRET_TOKEN if waits_for_leave else Handler.SECRET_TOKEN,
        prevent_destroy=protect,
        # The token controller fills data; fleetplan only reads it.
        ignore_paths=frozenset({"data"}), options={"serviceAccount": name})


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _member_resources(fleet: Fleet, source: BundleSource, member: str, leader_id: str, leader_ns: str,
                      set_id: str, server: str, join: JoinConfig | None) -> list[DesiredResource]:
    spec = fleet.spec
    ns = spec.antrea.member_namespace
    protect = _protected(fleet, member, "member")
    out: list[DesiredResource] = []
    if ns != "kube-system":
        out.append(DesiredResource(Address(member, "", "Namespace", "", ns),
                                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                                   prevent_destroy=protect))
    bundle = source.load(ANTREA_LAYOUT, spec.version, "member")
    images = {CONTROLLER_IMAGE: spec.antrea.images.member} if spec.antrea.images.member else {}
    objects = render_objects(bundle.objects, RenderOptions(
        spec.version, ANTREA_LAYOUT.upstream_namespace["member"], ns, images))
    out += bundle_resources(member, objects, protect=protect)
    controller = _controller(out)
    shared = spec.tokens.strategy == "shared"
    secret_name = (join.token_secret_name if join and join.token_secret_name
                   else token_name(member, shared))
    data: dict[str, Any]
    if join is not None:
        data = {"ca.crt": _b64(join.ca_crt or ""), "namespace": _b64(leader_ns),
                "token": _b64(join.token or "")}
        depends: frozenset[Address] = frozenset()
    else:
        token = token_address(fleet, token_name(member, shared))
        data = {"ca.crt": Ref(token, "ca.crt", sensitive=False, transform="base64"),
                "namespace": _b64(leader_ns),
                "token": Ref(token, "token", sensitive=True, transform="base64")}
        depends = frozenset({Address(fleet.leader_name, MC_GROUP, "ClusterSet", leader_ns, set_id)})
    secret = DesiredResource(Address(member, "", "Secret", ns, secret_name), {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": secret_name, "namespace": ns}, "data": data},
        sensitive_paths=frozenset({"data.token"}), prevent_destroy=protect)
    cluster_set = DesiredResource(
        Address(member, MC_GROUP, "ClusterSet", ns, set_id),
        {"apiVersion": CLUSTERSET_API, "kind": "ClusterSet",
         "metadata": {"name": set_id, "namespace": ns},
         "spec": {"clusterID": member,
                  "leaders": [{"clusterID": leader_id, "server": server, "secret": secret_name}],
                  "namespace": leader_ns}},
        depends_on=controller | {secret.address} | depends,
        readiness=Readiness(ReadinessKind.CONDITION, condition_type="Ready",
                            description=f"ClusterSet {set_id} Ready on {member}"),
        prevent_destroy=protect)
    if join is not None and not join.has_token:
        # antctl-style join file naming a Secret the member team created themselves.
        return [*out, replace(cluster_set, depends_on=controller)]
    return [*out, secret, cluster_set]

