"""The lab: real Kubernetes control planes on loopback for tests and the demo, without Docker.

Each cluster is etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (one fake,
Ready Node), built from pinned Go modules by `lab/build.sh`. Cluster `i` lives on its own loopback
address 127.0.<i>.1 with its own CA. The lab's state directory (default `./.lab`, or
`$FLEETPLAN_LAB_DIR`) records processes and ports, so `down` and `status` work from any process.

Public API (other modules and tests use only these names):

    up(clusters, prefix, lab_dir) -> Lab       down(lab_dir) -> int      status(lab_dir) -> LabStatus | None
    Lab(dir, clusters, kubeconfig)             LabCluster(name, host, server, kubeconfig, context, ca, ...)
    ServiceServer / serve_service / find_endpoint / admission_handler   (fleetplan.lab.webhooks)
    CertificateAuthority                                                 (fleetplan.lab.pki)

This package never imports the Kubernetes client: it talks HTTP(S) itself (fleetplan.lab.rest).
"""

from fleetplan.lab.lifecycle import ClusterStatus, LabStatus, down, status, up, wait_until_up
from fleetplan.lab.pki import CertificateAuthority
from fleetplan.lab.state import Lab, LabCluster, default_dir, read_lab
from fleetplan.lab.webhooks import (
    AdmissionDecision,
    ServiceServer,
    WebhookRequest,
    WebhookResponse,
    admission_handler,
    find_endpoint,
    serve_service,
    service_dns_names,
)

__all__ = [
    "AdmissionDecision",
    "CertificateAuthority",
    "ClusterStatus",
    "Lab",
    "LabCluster",
    "LabStatus",
    "ServiceServer",
    "WebhookRequest",
    "WebhookResponse",
    "admission_handler",
    "default_dir",
    "down",
    "find_endpoint",
    "read_lab",
    "serve_service",
    "service_dns_names",
    "status",
    "up",
    "wait_until_up",
]
