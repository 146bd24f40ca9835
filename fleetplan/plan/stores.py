"""Which `StateStore` a fleet uses: `spec.state.backend` turned into a local or a Kubernetes store.

The Kubernetes store lives on the cluster `spec.state.kubeconfig`/`context` names (a cluster outside
the fleet, such as a management cluster CI runners share), else on the fleet cluster
`spec.state.cluster`, else on the leader. Its namespace must exist: fleetplan does not create
namespaces for its own bookkeeping, because CI identities often may not.
"""

from __future__ import annotations

from pathlib import Path

from fleetplan.config.models import Fleet
from fleetplan.errors import ConfigError, StateError
from fleetplan.live.clusters import NotFoundError
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.live.objects import ObjectClient
from fleetplan.state.kubernetes_store import KubernetesStateStore
from fleetplan.state.storing import LocalStateStore

DEFAULT_NAMESPACE = "fleetplan-system"
AnyStore = LocalStateStore | KubernetesStateStore


def state_secret_name(fleet: Fleet) -> str:
    return fleet.spec.state.secret_name or f"fleetplan-state-{fleet.name}"


def open_store(fleet: Fleet, fleet_dir: Path) -> AnyStore:
    spec = fleet.spec.state
    if spec.backend == "local":
        return LocalStateStore(fleet.state_path(fleet_dir))
    if spec.kubeconfig is not None:
        access = ClusterAccess("state", str(spec.kubeconfig), spec.context)
    else:
        wanted = spec.cluster or (fleet.spec.leader.name if fleet.spec.leader.join_config is None else None)
        refs = {ref.name: ref for ref in fleet.clusters()}
        if wanted is None or wanted not in refs:
            raise ConfigError(
                f"spec.state.cluster {wanted!r} is not a cluster of this fleet" if wanted
                else "a member-only fleet must say where its kubernetes state lives",
                hint="set spec.state.cluster to a member, or spec.state.kubeconfig",
            )
        ref = refs[wanted]
        access = ClusterAccess(ref.name, str(ref.kubeconfig), ref.context, ref.ca_sha256)
    namespace = spec.namespace or DEFAULT_NAMESPACE
    return kubernetes_store(ObjectClient.connect(access), namespace, state_secret_name(fleet),
                            spec.lease_duration_seconds, where=f"cluster {access.name} Secret")


def kubernetes_store(api: ObjectClient, namespace: str, name: str, lease_duration: int, *,
                     where: str = "Secret", check_namespace: bool = True) -> KubernetesStateStore:
    """A Kubernetes store on `api`, after checking (unless told not to) that its namespace exists."""
    try:
        found = api.get("v1", "Namespace", "", namespace) if check_namespace else {}
    except NotFoundError:
        found = None
    if found is None:
        raise StateError(f"the state namespace {namespace} does not exist on cluster {api.name}",
                         hint=f"create it (kubectl create namespace {namespace}) or set spec.state.namespace")
    return KubernetesStateStore(api, namespace, name, lease_duration=lease_duration,
                                where=f"{where} {namespace}/{name}")
