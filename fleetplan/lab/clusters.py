"""Bringing one lab cluster up: PKI, etcd, API server, controllers, kwok and its fake Node.

Order and readiness gates (each gate also watches that the processes it depends on are alive, so a
crash is reported at once with the component's log tail instead of a timeout):

    etcd /health -> kube-apiserver /readyz -> KCM + scheduler + kwok started together
    -> fake Node created -> Node Ready, default ServiceAccount and kube-root-ca.crt exist,
       KCM and scheduler /healthz

Every spawned process is recorded in the state file before the next step, so `down` can always
clean up, even after a failed or interrupted `up`.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from fleetplan.errors import LabError
from fleetplan.lab import components as comp
from fleetplan.lab.pki import CertificateAuthority, write_service_account_keys
from fleetplan.lab.processes import ProcessRecord, component_env, exit_status, is_running, log_tail, spawn
from fleetplan.lab.rest import LabRest, wait_for
from fleetplan.lab.state import LabCluster

Recorder = Callable[[str, ProcessRecord], None]
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
COMPONENTS = ("egress-proxy", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def host_for(index: int) -> str:
    return f"127.0.{index}.1"


def pod_cidr_for(index: int) -> str:
    return f"10.{index}.0.0/16"


def node_ip_for(index: int) -> str:
    return f"10.{index}.255.254"


def node_twin_for(index: int) -> str:
    return f"127.{index}.255.254"


def free_ports(host: str, count: int) -> list[int]:
    """`count` distinct free ports on `host` (all held open while choosing, so none repeats)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]


def plan_cluster(name: str, index: int, lab_dir: Path, shm_root: Path | None) -> LabCluster:
    """Decide names, addresses, ports and paths; nothing is started."""
    if not 1 <= index <= 254:
        raise LabError(f"cluster index {index} is outside 1..254",
                       hint="use fewer clusters or a lower --first-index")
    host = host_for(index)
    root = lab_dir / name
    names = ("etcd-client", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ports = dict(zip(names, free_ports(host, len(names)), strict=True))
    # kwok's server plays the kubelet endpoint, so it listens where the API server's calls to the
    # node address (10.i.255.254) arrive: that address's loopback twin.
    ports["kwok"] = free_ports(node_twin_for(index), 1)[0]
    # On disk, not tmpfs: etcd preallocates 64 MiB WAL segments, which tmpfs would hold in RAM;
    # with --unsafe-no-fsync the page cache absorbs the writes anyway.
    etcd_data = root / "etcd"
    # Unix socket paths are limited to 107 bytes: prefer the short tmpfs directory.
    egress = (shm_root / f"{name}.egress.sock") if shm_root is not None else (root / "egress.sock")
    return LabCluster(name=name, index=index, host=host, api_port=ports["kube-apiserver"],
                      kubeconfig=str(root / "kubeconfig"), context=name, ca=str(root / "pki" / "ca.crt"),
                      dir=str(root), pod_cidr=pod_cidr_for(index), ports=ports, etcd_data=str(etcd_data),
                      node_ip=node_ip_for(index), egress_socket=str(egress))


def write_pki(cluster: LabCluster) -> None:
    """The cluster's own CA, serving cert, component client certs, SA keys and kubeconfigs."""
    p = comp.ClusterPaths(Path(cluster.dir))
    ca = CertificateAuthority.create(f"fleetplan-lab-{cluster.name}-ca")
    ca.write(p.pem("ca.crt"), p.pem("ca.key"))
    first_service_ip = comp.SERVICE_CIDR.split("/")[0].rsplit(".", 1)[0] + ".1"
    ca.issue("kube-apiserver", server=True,
             dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                        "kubernetes.default.svc.cluster.local"),
             ips=(cluster.host, "127.0.0.1", first_service_ip),
             ).write(p.pem("apiserver.crt"), p.pem("apiserver.key"))
    front = CertificateAuthority.create(f"fleetplan-lab-{cluster.name}-front-proxy-ca")
    front.write(p.pem("front-proxy-ca.crt"), p.pem("front-proxy-ca.key"))
    front.issue("front-proxy-client", client=True).write(p.pem("front-proxy-client.crt"),
                                                         p.pem("front-proxy-client.key"))
    write_service_account_keys(p.pem("sa.key"), p.pem("sa.pub"))
    users = {"admin": ("kubernetes-admin", ("system:masters",)),
             "kube-controller-manager": ("system:kube-controller-manager", ()),
             "kube-scheduler": ("system:kube-scheduler", ()),
             "kwok": ("fleetplan-lab:kwok", ("system:masters",))}
    for file, (user, groups) in users.items():
        issued = ca.issue(user, groups=groups, client=True)
        issued.write(p.pem(f"{file}.crt"), p.pem(f"{file}.key"))
        entry = (cluster.name, cluster.server, ca.cert_pem, issued.cert_pem, issued.key_pem)
        config = comp.kubeconfig([entry], cluster.name)
        comp.write_kubeconfig(p.admin_kubeconfig if file == "admin" else p.component_kubeconfig(file), config)
    comp.write_kwok_config(p.kwok_config)
    comp.write_egress_config(p.egress_config, cluster.egress_socket)


def admin_rest(cluster: LabCluster, timeout: float = 30.0) -> LabRest:
    pki = Path(cluster.dir) / "pki"
    return LabRest(cluster.host, cluster.api_port, cluster.ca, pki / "admin.crt", pki / "admin.key", timeout)


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    """One GET over `http.client`, straight to the address given: unlike urllib, it never goes
    through a proxy from http_proxy/https_proxy, which could not reach a loopback address anyway."""
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _insecure_health(host: str, port: int) -> bool:
    """KCM and the scheduler serve /healthz with a self-signed cert; no credentials are sent."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    status, _ = _get(http.client.HTTPSConnection(host, port, context=ctx, timeout=5), "/healthz")
    return status == 200


def _etcd_healthy(host: str, port: int) -> bool:
    status, body = _get(http.client.HTTPConnection(host, port, timeout=5), "/health")
    return status == 200 and b'"health":"true"' in body


class ClusterStarter:
    """Starts one planned cluster's processes, recording each; raises LabError with log tails."""

    def __init__(self, cluster: LabCluster, bin_dir: Path, record: Recorder, timeout: float) -> None:
        self.cluster, self.bin_dir, self._record, self.timeout = cluster, bin_dir, record, timeout
        self.paths = comp.ClusterPaths(Path(cluster.dir))
        self.started: dict[str, ProcessRecord] = {}

    def _spawn(self, component: str, argv: list[str]) -> None:
        extra = {"GOMAXPROCS": "2"}
        if component == "egress-proxy":  # runs this package, wherever the caller's cwd is
            extra["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
        record = spawn(component, argv, self.paths.logs / f"{component}.log", env=component_env(extra))
        self.started[component] = record
        self._record(self.cluster.name, record)

    def _dead(self) -> str | None:
        for component, record in self.started.items():
            if not is_running(record):
                code = exit_status(record)
                return f"{component} of cluster {self.cluster.name} exited (status {code})"
        return None

    def _fail(self, err: LabError) -> LabError:
        tails = []
        for component, record in self.started.items():
            tail = log_tail(record.log, 15)
            if tail:
                tails.append(f"--- {self.cluster.name}/{component} ({record.log}):\n{tail}")
        summary = "; ".join(d.summary for d in err.diagnostics)
        return LabError(f"cluster {self.cluster.name} did not start: {summary}"
                        + ("\n" + "\n".join(tails) if tails else ""),
                        hint=f"component logs are in {self.paths.logs}")

    def start(self) -> LabCluster:
        try:
            self._start()
        except LabError as err:
            raise self._fail(err) from err
        return replace(self.cluster, processes=tuple(self.started[c] for c in COMPONENTS))

    def _start(self) -> None:
        c, p, b = self.cluster, self.paths, self.bin_dir
        write_pki(c)
        Path(c.egress_socket).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        Path(c.etcd_data).mkdir(mode=0o700, exist_ok=True)  # etcd warns about wider modes
        self._spawn("egress-proxy", comp.egress_argv(sys.executable, c.egress_socket, c.pod_cidr,
                                                     c.loopback_cidr))
        self._spawn("etcd", comp.etcd_argv(b / "etcd", c.name, c.host, c.ports["etcd-client"],
                                           c.ports["etcd-peer"], Path(c.etcd_data)))
        wait_for(f"etcd of {c.name}", lambda: _etcd_healthy(c.host, c.ports["etcd-client"]), self.timeout,
                 abort=self._dead)
        self._spawn("kube-apiserver", comp.apiserver_argv(b / "kube-apiserver", p, c.host, c.api_port,
                                                          c.ports["etcd-client"]))
        anonymous = LabRest(c.host, c.api_port, c.ca, timeout=10)
        wait_for(f"kube-apiserver /readyz of {c.name}", anonymous.healthy, self.timeout, abort=self._dead)
        wait_for(f"the egress proxy socket of {c.name}", Path(c.egress_socket).exists, self.timeout,
                 abort=self._dead)
        self._spawn("kube-controller-manager", comp.controller_manager_argv(
            b / "kube-controller-manager", p, c.name, c.host, c.ports["kube-controller-manager"]))
        self._spawn("kube-scheduler", comp.scheduler_argv(b / "kube-scheduler", p, c.host,
                                                          c.ports["kube-scheduler"]))
        self._spawn("kwok", comp.kwok_argv(b / "kwok", p, c.loopback_for(c.node_ip), c.ports["kwok"],
                                           c.pod_cidr, c.node_ip))
        api = admin_rest(c)
        api.ensure("/api/v1/nodes", comp.fake_node(f"{c.name}-node-1"))
        wait_for(f"a Ready kwok node in {c.name}", lambda: node_ready(api, f"{c.name}-node-1"), self.timeout,
                 abort=self._dead)
        wait_for(f"the default ServiceAccount in {c.name}",
                 lambda: api.healthy("/api/v1/namespaces/default/serviceaccounts/default"), self.timeout,
                 abort=self._dead)
        wait_for(f"kube-root-ca.crt in {c.name}",
                 lambda: api.healthy("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"), self.timeout,
                 abort=self._dead)
        for component in ("kube-controller-manager", "kube-scheduler"):
            wait_for(f"{component} /healthz of {c.name}", _health_probe(c.host, c.ports[component]),
                     self.timeout, abort=self._dead)


def _health_probe(host: str, port: int) -> Callable[[], bool]:
    return lambda: _insecure_health(host, port)


def node_ready(api: LabRest, name: str) -> bool:
    node = api.get(f"/api/v1/nodes/{name}")
    return any(cond.get("type") == "Ready" and cond.get("status") == "True"
               for cond in node.get("status", {}).get("conditions", []))
