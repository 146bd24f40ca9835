"""Command lines, kubeconfigs and kwok stages for one lab cluster's components.

Pure functions of a `ClusterPaths` and its ports: no processes are started here, which keeps the
flag choices reviewable in one place. Why the less obvious flags are there:

* `--endpoint-reconciler-type=none`: the lease reconciler refuses loopback advertise addresses.
* `--enable-aggregator-routing=true` plus `--egress-selector-config-file`: webhooks and APIServices
  backed by a Service are dialled at the Service's endpoint address (a kwok pod IP in 10.<i>.0.0/16)
  instead of its ClusterIP, through the lab's CONNECT proxy (fleetplan.lab.egress), which lands the
  connection on 127.<i>.a.b. This is what lets a test-side process serve a webhook.
* `--authorization-mode=Node,RBAC` with NodeRestriction, bootstrap-token auth, and a KCM that runs
  every controller with its own service account (`--use-service-account-credentials`), as kubeadm
  does, so permissions in tests are the real ones.
* etcd runs with `--unsafe-no-fsync` on tmpfs: the data is throwaway and fsync dominates start-up.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from fleetplan.lab.pki import write_private

SERVICE_CIDR = "10.0.0.0/16"  # 10.<i>.0.0/16 are the pod networks of clusters i >= 1
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class ClusterPaths:
    """Where one cluster's files live."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    def pem(self, name: str) -> Path:
        return self.pki / name

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.pki / f"{component}.kubeconfig"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    @property
    def egress_config(self) -> Path:
        return self.root / "egress-selector.yaml"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(entries: list[tuple[str, str, bytes, bytes, bytes]], current: str) -> dict[str, object]:
    """A kubeconfig with one context per (name, server, ca, cert, key); contexts named after clusters."""
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": current,
        "clusters": [{"name": n, "cluster": {"server": s, "certificate-authority-data": _b64(ca)}}
                     for n, s, ca, _, _ in entries],
        "users": [{"name": f"{n}-admin", "user": {"client-certificate-data": _b64(crt),
                                                  "client-key-data": _b64(key)}}
                  for n, _, _, crt, key in entries],
        "contexts": [{"name": n, "context": {"cluster": n, "user": f"{n}-admin"}} for n, *_ in entries],
    }


def write_kubeconfig(path: Path, config: dict[str, object]) -> None:
    """Kubeconfigs are written as JSON (valid YAML for every loader) with mode 0600: they hold keys."""
    write_private(path, (json.dumps(config, indent=2) + "\n").encode())


def etcd_argv(binary: Path, name: str, host: str, client: int, peer: int, data_dir: Path) -> list[str]:
    return [str(binary), f"--name={name}", f"--data-dir={data_dir}",
            f"--listen-client-urls=http://{host}:{client}", f"--advertise-client-urls=http://{host}:{client}",
            f"--listen-peer-urls=http://{host}:{peer}", f"--initial-advertise-peer-urls=http://{host}:{peer}",
            f"--initial-cluster={name}=http://{host}:{peer}", "--initial-cluster-state=new",
            "--unsafe-no-fsync=true", "--auto-compaction-retention=1", "--log-level=warn"]


def apiserver_argv(binary: Path, p: ClusterPaths, host: str, port: int, etcd_client: int) -> list[str]:
    return [
        str(binary), f"--etcd-servers=http://{host}:{etcd_client}",
        f"--bind-address={host}", f"--advertise-address={host}", f"--secure-port={port}",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={p.pem('apiserver.crt')}", f"--tls-private-key-file={p.pem('apiserver.key')}",
        f"--client-ca-file={p.pem('ca.crt')}",
        f"--service-account-issuer=https://{host}:{port}",
        f"--service-account-key-file={p.pem('sa.pub')}",
        f"--service-account-signing-key-file={p.pem('sa.key')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        "--enable-bootstrap-token-auth=true", "--allow-privileged=true",
        "--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP",
        f"--requestheader-client-ca-file={p.pem('front-proxy-ca.crt')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={p.pem('front-proxy-client.crt')}",
        f"--proxy-client-key-file={p.pem('front-proxy-client.key')}",
        f"--egress-selector-config-file={p.egress_config}",
        f"--cert-dir={p.root / 'apiserver-certs'}", "--profiling=false",
    ]


def write_egress_config(path: Path, socket_path: str) -> None:
    """Route the API server's "cluster" traffic (webhooks, APIServices, node proxy) via the proxy."""
    config = {"apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
              "egressSelections": [{"name": "cluster", "connection": {
                  "proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": socket_path}}}}]}
    path.write_text(json.dumps(config, indent=2) + "\n")


def egress_argv(python: str, socket_path: str, pod_network: str, loopback_network: str) -> list[str]:
    return [python, "-m", "fleetplan.lab.egress", f"--socket={socket_path}",
            f"--map={pod_network}={loopback_network}"]


def controller_manager_argv(binary: Path, p: ClusterPaths, name: str, host: str, port: int) -> list[str]:
    kc = p.component_kubeconfig("kube-controller-manager")
    return [
        str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}", f"--bind-address={host}", f"--secure-port={port}",
        f"--cert-dir={p.root / 'kcm-certs'}", "--leader-elect=false", f"--cluster-name={name}",
        "--use-service-account-credentials=true", "--controllers=*,bootstrapsigner,tokencleaner",
        f"--service-account-private-key-file={p.pem('sa.key')}", f"--root-ca-file={p.pem('ca.crt')}",
        f"--cluster-signing-cert-file={p.pem('ca.crt')}", f"--cluster-signing-key-file={p.pem('ca.key')}",
        f"--requestheader-client-ca-file={p.pem('front-proxy-ca.crt')}", "--profiling=false",
    ]


def scheduler_argv(binary: Path, p: ClusterPaths, host: str, port: int) -> list[str]:
    kc = p.component_kubeconfig("kube-scheduler")
    return [str(binary), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", f"--bind-address={host}", f"--secure-port={port}",
            "--leader-elect=false", "--profiling=false"]


def kwok_argv(binary: Path, p: ClusterPaths, node_twin: str, port: int, pod_cidr: str, node_ip: str) -> list[str]:
    return [str(binary), f"--kubeconfig={p.component_kubeconfig('kwok')}", f"--config={p.kwok_config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--cidr={pod_cidr}", f"--node-ip={node_ip}", f"--node-port={port}",
            f"--server-address={node_twin}:{port}",
            "--node-lease-duration-seconds=40"]


def fake_node(name: str) -> dict[str, object]:
    """The Node kwok plays: untainted and labelled like a Linux worker, so real manifests schedule."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok"}},
            "spec": {}}


# kwok follows Stage objects; these are the minimum for Ready nodes and Running/Ready pods.
_CONDITIONS = """{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ or $.metadata.creationTimestamp $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
- address: {{ .metadata.name | Quote }}
  type: Hostname
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ NodePort }}
"""
_NODE_READY = _CONDITIONS + """allocatable: {cpu: "64", memory: 256Gi, pods: "500"}
capacity: {cpu: "64", memory: 256Gi, pods: "500"}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: lab
  osImage: lab
  bootID: ""
  machineID: ""
  systemUUID: ""
phase: Running
"""
_POD_READY = """{{ $now := Now }}
conditions:
{{ range list "PodScheduled" "Initialized" "Ready" "ContainersReady" }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ . }}
{{ end }}
{{ range $.spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, ready: true, started: true, restartCount: 0,
   state: {running: {startedAt: {{ $now | Quote }}}}}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, ready: true, restartCount: 0,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},
   finishedAt: {{ $now | Quote }}}}}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs: [{ip: {{ index . 0 | Quote }}}]
{{ end }}
{{ $hostNet := or .spec.hostNetwork false }}
{{ $uid := or .metadata.uid "" }}
{{ with PodIPsWith .spec.nodeName $hostNet $uid (or .metadata.name "") (or .metadata.namespace "") }}
podIP: {{ index . 0 | Quote }}
podIPs: [{ip: {{ index . 0 | Quote }}}]
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""
_POD_SUCCEEDED = """{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- {image: {{ .image | Quote }}, name: {{ .name | Quote }}, ready: false, started: false, restartCount: 0,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},
   finishedAt: {{ $now | Quote }}}}}
{{ end }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready, reason: PodCompleted}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: ContainersReady, reason: PodCompleted}
phase: Succeeded
"""


def _expr(key: str, operator: str, *values: str) -> dict[str, object]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def _stage(name: str, kind: str, exprs: list[dict[str, object]], nxt: dict[str, object],
           delay_ms: int = 0) -> dict[str, object]:
    spec: dict[str, object] = {"resourceRef": {"apiGroup": "v1", "kind": kind},
                               "selector": {"matchExpressions": exprs}, "next": nxt}
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms,
                         "jitterDurationMilliseconds": delay_ms + delay_ms // 5}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def kwok_stages() -> list[dict[str, object]]:
    ready = '.status.conditions.[] | select( .type == "Ready" ) | .status'
    no_delete = _expr(".metadata.deletionTimestamp", "DoesNotExist")
    return [
        _stage("lab-node-ready", "Node", [_expr(ready, "NotIn", "True")], {"statusTemplate": _NODE_READY}),
        _stage("lab-node-heartbeat", "Node",
               [_expr(".status.phase", "In", "Running"), _expr(ready, "In", "True")],
               {"statusTemplate": _CONDITIONS}, delay_ms=20_000),
        _stage("lab-pod-ready", "Pod", [no_delete, _expr(".status.phase", "In", "Pending"),
                                        _expr(ready, "NotIn", "True")], {"statusTemplate": _POD_READY}),
        _stage("lab-pod-succeeded", "Pod", [no_delete, _expr(".status.phase", "In", "Running"),
                                            _expr(".spec.restartPolicy", "In", "Never", "OnFailure"),
                                            _expr(".metadata.ownerReferences.[].kind", "In", "Job")],
               {"statusTemplate": _POD_SUCCEEDED}, delay_ms=1_000),
        _stage("lab-pod-delete", "Pod", [_expr(".metadata.deletionTimestamp", "Exists")], {"delete": True}),
    ]


def write_kwok_config(path: Path) -> None:
    path.write_text("\n---\n".join(json.dumps(s, indent=1) for s in kwok_stages()) + "\n")
