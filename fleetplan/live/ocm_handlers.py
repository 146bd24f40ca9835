"""The OCM handlers, plugged into the engine's registry: accept-cluster, release-cluster, and the
bootstrap-token rule "re-mint only while a spoke still needs it".

- `accept-cluster` (on the hub): `ocm_accept.accept_cluster`, then wait for the resource's
  readiness on the ManagedCluster (ManagedClusterJoined). Its removal is the ManifestWork guard:
  it runs before anything of the spoke is deleted and refuses unless `options.force` is set.
- `release-cluster` (on the hub): creating it does nothing; removing it deletes the spoke's CSRs,
  ManagedCluster and hub namespace, which the graph orders after the spoke is unjoined.
- `bootstrap-token` and `bound-token`: the spokes' bootstrap tokens (`ocm_tokens`): neither is
  re-minted once every spoke it bootstraps has joined.

Importing this module registers all four (`register_ocm_handlers` is idempotent).
Invariant: `ClusterOcmHub` is the only place here that builds requests; it uses the engine's
`Cluster` protocol plus `KubeCluster.replace_subresource` (PUT) for the CSR approval.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from fleetplan.errors import ClusterError
from fleetplan.live import handlers
from fleetplan.live import readiness as readying
from fleetplan.live.clusters import Cluster, Obj
from fleetplan.live.ocm_accept import (
    CLUSTER_API,
    CSR_API,
    CSR_CLUSTER_LABEL,
    WORK_API,
    accept_cluster,
    check_no_manifest_works,
    release_cluster,
)
from fleetplan.live.ocm_tokens import BootstrapTokenSecretHandler, BoundBootstrapTokenHandler
from fleetplan.stacks.desired import Handler


class ClusterOcmHub:
    """`OcmHub` over the engine's `Cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.name = cluster.name

    def get_managed_cluster(self, cluster: str) -> Obj | None:
        return self.cluster.get(CLUSTER_API, "ManagedCluster", "", cluster)

    def list_cluster_csrs(self, cluster: str) -> list[Obj]:
        return self.cluster.list(CSR_API, "CertificateSigningRequest", "", f"{CSR_CLUSTER_LABEL}={cluster}")

    def approve_csr(self, csr: Obj, message: str) -> None:
        body = json.loads(json.dumps(csr))
        conditions = body.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": "Approved", "status": "True", "reason": "FleetplanApprove",
                           "message": message})
        name = body["metadata"]["name"]
        replace = getattr(self.cluster, "replace_subresource", None)
        if replace is None:
            raise ClusterError(f"cluster {self.name}: this client cannot approve CSRs "
                               "(it lacks replace_subresource)")
        replace(CSR_API, "CertificateSigningRequest", "", name, "approval", body)

    def accept_managed_cluster(self, cluster: str, labels: Mapping[str, str]) -> None:
        self.cluster.apply({"apiVersion": CLUSTER_API, "kind": "ManagedCluster",
                            "metadata": {"name": cluster, "labels": dict(labels)},
                            "spec": {"hubAcceptsClient": True}})

    def list_manifest_works(self, namespace: str) -> list[Obj]:
        return self.cluster.list(WORK_API, "ManifestWork", namespace, "")

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return self.cluster.delete(api_version, kind, namespace, name)


def _labels_digest(options: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(options.get("labels") or {}, sort_keys=True).encode()).hexdigest()[:16]


class AcceptClusterHandler:
    object_backed = False
    outputs_readable = True

    def assess(self, item: handlers.AssessInput) -> handlers.Assessment:
        name = str(item.options.get("clusterName", item.address.name))
        if not item.recorded:
            return handlers.Assessment("create", f"accept spoke {name} on hub {item.address.cluster}")
        if item.record_outputs.get("labels") != _labels_digest(item.options):
            return handlers.Assessment("update", f"the labels of ManagedCluster {name} changed")
        return handlers.Assessment("no-op", f"spoke {name} already accepted")

    def converge(self, cluster: Cluster, work: handlers.Work,
                 progress: readying.Progress) -> handlers.Result:
        name = str(work.options.get("clusterName", work.address.name))
        progress(f"waiting for ManagedCluster {name} and its CSR on hub {cluster.name}")
        outcome = accept_cluster(ClusterOcmHub(cluster), name, list(work.options.get("requesters") or ()),
                                 dict(work.options.get("labels") or {}),
                                 float(work.options.get("timeoutSeconds") or work.timeout))
        for ignored in outcome.ignored:
            progress(f"not approving CSR {ignored.name} for {name}: {ignored.reason}")
        readying.wait_ready(cluster, CLUSTER_API, "ManagedCluster", "", name, work.readiness,
                            timeout=work.timeout, progress=progress)
        return self.read(cluster, work)

    def read(self, cluster: Cluster, work: handlers.Work) -> handlers.Result:
        return handlers.Result(outputs={"labels": _labels_digest(work.options)})

    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        name = str(work.options.get("clusterName", work.address.name))
        works = check_no_manifest_works(ClusterOcmHub(cluster), name, bool(work.options.get("force")))
        if works:
            progress(f"--force: removing spoke {name} although {len(works)} ManifestWork(s) target it")


class ReleaseClusterHandler:
    object_backed = False
    outputs_readable = True

    def assess(self, item: handlers.AssessInput) -> handlers.Assessment:
        if not item.recorded:
            return handlers.Assessment("create", "record the spoke for an ordered release")
        return handlers.Assessment("no-op", "recorded")

    def converge(self, cluster: Cluster, work: handlers.Work,
                 progress: readying.Progress) -> handlers.Result:
        return handlers.Result()

    def read(self, cluster: Cluster, work: handlers.Work) -> handlers.Result:
        return handlers.Result()

    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        name = str(work.options.get("clusterName", work.address.name))
        progress(f"removing CSRs, ManagedCluster and namespace of spoke {name} from hub {cluster.name}")
        release_cluster(ClusterOcmHub(cluster), name, timeout=work.timeout)


def register_ocm_handlers() -> None:
    handlers.register(Handler.ACCEPT_CLUSTER, AcceptClusterHandler())
    handlers.register(Handler.RELEASE_CLUSTER, ReleaseClusterHandler())
    handlers.register(Handler.BOOTSTRAP_TOKEN, BootstrapTokenSecretHandler())
    current = handlers.lookup(Handler.BOUND_TOKEN)
    if not isinstance(current, BoundBootstrapTokenHandler):
        handlers.register(Handler.BOUND_TOKEN, BoundBootstrapTokenHandler(current))


register_ocm_handlers()
