"""Build the resource DAG from desired resources: explicit edges plus a list of small transforms.

Invariants:
- Nodes are exactly the desired addresses; an edge `a -> b` means `a` must converge before `b`.
- Implicit edges (each one transform below) are added only between resources that are both desired
  and on the same cluster, except `Ref` edges, which may cross clusters (a token minted on the
  leader and written into a member).
- An explicit dependency or a `Ref` source that is not desired is an error naming both addresses;
  a cycle is an error naming every address on it, in order.
- Orders are deterministic (ties broken by the address string), so plans and golden files are
  stable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import networkx as nx

from fleetplan.addrs import Address
from fleetplan.errors import Diagnostic, PlanError
from fleetplan.stacks.desired import DesiredResource, Handler, Ref, Template

Edge = tuple[Address, Address, str]  # dependency, dependent, why
Transform = Callable[[Mapping[Address, DesiredResource]], Iterator[Edge]]

_RBAC = "rbac.authorization.k8s.io"
_CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")


class ResourceGraph:
    """An immutable view over the DAG; every query returns addresses, never networkx objects."""

    def __init__(self, nodes: Iterable[Address], edges: Iterable[Edge]) -> None:
        dag: Any = nx.DiGraph()
        dag.add_nodes_from(nodes)
        for before, after, why in edges:
            if before != after:
                dag.add_edge(before, after, why=why)
        self._dag = dag
        _raise_on_cycle(dag)

    @property
    def addresses(self) -> frozenset[Address]:
        return frozenset(self._dag.nodes)

    def __contains__(self, address: object) -> bool:
        return address in self._dag

    def dependencies(self, address: Address) -> frozenset[Address]:
        """Direct dependencies: what must converge before `address`."""
        return frozenset(self._dag.predecessors(address))

    def dependents(self, address: Address) -> frozenset[Address]:
        return frozenset(self._dag.successors(address))

    def ancestors(self, address: Address) -> frozenset[Address]:
        return frozenset(nx.ancestors(self._dag, address))

    def descendants(self, address: Address) -> frozenset[Address]:
        return frozenset(nx.descendants(self._dag, address))

    def edges(self) -> tuple[Edge, ...]:
        return tuple(
            sorted(
                ((a, b, d["why"]) for a, b, d in self._dag.edges(data=True)),
                key=lambda e: (str(e[0]), str(e[1])),
            )
        )

    def creation_order(self) -> tuple[Address, ...]:
        return tuple(nx.lexicographical_topological_sort(self._dag, key=str))

    def deletion_order(self) -> tuple[Address, ...]:
        return tuple(reversed(self.creation_order()))

    def narrowed_to(self, patterns: Sequence[str]) -> ResourceGraph:
        """The targets (addresses matching a pattern) plus everything they depend on."""
        keep: set[Address] = set()
        for address in self._dag.nodes:
            if any(address.matches(p) for p in patterns):
                keep.add(address)
                keep.update(nx.ancestors(self._dag, address))
        sub = self._dag.subgraph(keep)
        return ResourceGraph(sub.nodes, ((a, b, d["why"]) for a, b, d in sub.edges(data=True)))


def build_graph(
    resources: Sequence[DesiredResource], transforms: Sequence[Transform] | None = None
) -> ResourceGraph:
    """The DAG of `resources`; raises `PlanError` on duplicates, dangling edges or cycles."""
    by_address: dict[Address, DesiredResource] = {}
    for resource in resources:
        if resource.address in by_address:
            raise PlanError(
                f"two desired resources share the address {resource.address}",
                address=str(resource.address),
                hint="each object must be declared once per cluster",
            )
        by_address[resource.address] = resource
    edges: list[Edge] = []
    for transform in transforms if transforms is not None else DEFAULT_TRANSFORMS:
        edges.extend(transform(by_address))
    return ResourceGraph(by_address, edges)


def explicit_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    for resource in resources.values():
        for dependency in sorted(resource.depends_on):
            _require(resources, dependency, resource.address, "depends on")
            yield dependency, resource.address, "explicit"


def ref_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    for resource in resources.values():
        for ref in iter_refs(resource.body):
            _require(resources, ref.source, resource.address, f"uses output {ref.output!r} of")
            yield ref.source, resource.address, f"uses {ref.output}"


def crd_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    crds: dict[tuple[str, str, str], Address] = {}
    for address, resource in resources.items():
        if address.api_group_kind == _CRD:
            spec = resource.body.get("spec", {})
            crds[(address.cluster, spec.get("group", ""), spec.get("names", {}).get("kind", ""))] = address
    for address in resources:
        crd = crds.get((address.cluster, address.group, address.kind))
        if crd is not None:
            yield crd, address, "custom resource of"


def namespace_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    for address in resources:
        if address.namespace:
            namespace = Address(address.cluster, "", "Namespace", "", address.namespace)
            if namespace in resources:
                yield namespace, address, "in namespace"


_WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob")


def service_account_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    """ServiceAccounts before the bindings that name them, the tokens minted for them and the
    workloads whose pods run as them."""
    for address, resource in resources.items():
        accounts: list[tuple[str, str]] = []
        if address.group == _RBAC and address.kind in ("RoleBinding", "ClusterRoleBinding"):
            for subject in resource.body.get("subjects") or ():
                if subject.get("kind") == "ServiceAccount":
                    accounts.append((subject.get("namespace") or address.namespace, subject.get("name", "")))
        elif resource.handler == Handler.BOUND_TOKEN:
            accounts.append((address.namespace, str(resource.options.get("serviceAccount", address.name))))
        elif address.kind == "Secret" and resource.body.get("type") == "kubernetes.io/service-account-token":
            annotations = resource.body.get("metadata", {}).get("annotations") or {}
            accounts.append((address.namespace, annotations.get("kubernetes.io/service-account.name", "")))
        elif address.kind in _WORKLOADS:
            # A workload created before its ServiceAccount has its pods refused ("serviceaccount not
            # found"); the controller then backs off exponentially, often past the readiness timeout.
            pod = (resource.body.get("spec") or {}).get("template") or {}
            if address.kind == "CronJob":
                pod = ((resource.body.get("spec") or {}).get("jobTemplate") or {}).get("spec", {}).get("template") or {}
            pod_spec = (pod.get("spec") or {}) if isinstance(pod, dict) else {}
            name = pod_spec.get("serviceAccountName") or pod_spec.get("serviceAccount")
            if isinstance(name, str):
                accounts.append((address.namespace, name))
        for namespace, name in accounts:
            if namespace and name:
                account = Address(address.cluster, "", "ServiceAccount", namespace, name)
                if account in resources:
                    yield account, address, "uses service account"


def role_edges(resources: Mapping[Address, DesiredResource]) -> Iterator[Edge]:
    for address, resource in resources.items():
        if address.group != _RBAC or address.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role_ref = resource.body.get("roleRef") or {}
        kind, name = role_ref.get("kind"), role_ref.get("name")
        if kind not in ("Role", "ClusterRole") or not name:
            continue
        role = Address(address.cluster, _RBAC, kind, address.namespace if kind == "Role" else "", name)
        if role in resources:
            yield role, address, "binds role"


DEFAULT_TRANSFORMS: tuple[Transform, ...] = (
    explicit_edges,
    ref_edges,
    crd_edges,
    namespace_edges,
    service_account_edges,
    role_edges,
)


def iter_refs(value: Any) -> Iterator[Ref]:
    """Every `Ref` leaf in a JSON-like value, including those inside `Template`s."""
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, Template):
        for _, ref in value.refs:
            yield ref
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from iter_refs(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from iter_refs(item)


def _require(resources: Mapping[Address, DesiredResource], needed: Address, by: Address, verb: str) -> None:
    if needed not in resources:
        raise PlanError(
            f"{by} {verb} {needed}, which is not part of the fleet",
            address=str(by),
            hint="declare the dependency's resource or remove the reference",
        )


def _raise_on_cycle(dag: Any) -> None:
    try:
        cycle = nx.find_cycle(dag)
    except nx.NetworkXNoCycle:
        return
    names = [str(edge[0]) for edge in cycle] + [str(cycle[0][0])]
    raise PlanError(
        [
            Diagnostic(
                "dependency cycle: " + " -> ".join(names),
                address=names[0],
                hint="remove one of the explicit dependencies or Refs on this cycle",
            )
        ]
    )
