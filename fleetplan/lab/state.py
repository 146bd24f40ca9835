"""The lab's state directory: what is running, where, and how to reach it.

Layout of a lab directory (default `./.lab`, or `$FLEETPLAN_LAB_DIR`):

    lab.json                  this module's file: clusters, ports, process records (no secrets)
    kubeconfig                merged kubeconfig, one context per cluster (contains client keys, 0600)
    <cluster>/kubeconfig      that cluster's admin kubeconfig (0600)
    <cluster>/pki/...         CA, serving and client certificates, SA keys
    <cluster>/etcd/           etcd data (removed by `down`)
    <cluster>/logs/*.log      one log per component, kept after `down`
    <cluster>/kwok.yaml       the kwok stages the fake node and pods follow
    <cluster>/egress-selector.yaml   routes the API server's "cluster" traffic via the egress proxy

The egress proxies' unix sockets live in a short tmpfs directory (socket paths are length-limited),
recorded per cluster as `egress_socket`.

`lab.json` is rewritten atomically after every process start, so a crash in the middle of `up`
still leaves enough for `down` to stop what was started. Process records carry the pid's start
time, so a stale file never makes `down` signal an unrelated process.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleetplan.errors import LabError
from fleetplan.lab.processes import ProcessRecord

STATE_FILE = "lab.json"
FORMAT_VERSION = 1
_WRITE_LOCK = threading.Lock()


def default_dir() -> Path:
    """Where the lab lives unless told otherwise: `$FLEETPLAN_LAB_DIR`, else `./.lab`."""
    return Path(os.environ.get("FLEETPLAN_LAB_DIR") or ".lab").absolute()


@dataclass(frozen=True)
class LabCluster:
    """One lab cluster as callers use it. Paths are absolute strings so the value is JSON-plain.

    `host` is the cluster's own loopback address (127.0.<index>.1): its API server, etcd and
    controllers listen there. Pods get addresses from `pod_cidr` (10.<index>.0.0/16; hostNetwork
    pods get the node's `node_ip` 10.<index>.255.254). The API server reaches a pod address
    10.<index>.a.b through the lab's egress proxy at its loopback twin 127.<index>.a.b
    (`loopback_for`), which a test-side process can bind.
    """

    name: str
    index: int
    host: str
    api_port: int
    kubeconfig: str
    context: str
    ca: str
    dir: str
    pod_cidr: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: tuple[ProcessRecord, ...] = ()
    etcd_data: str = ""
    node_ip: str = ""
    egress_socket: str = ""

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.api_port}"

    @property
    def loopback_cidr(self) -> str:
        return f"127.{self.index}.0.0/16"

    def loopback_for(self, pod_address: str) -> str:
        """The loopback address where the API server's calls to `pod_address` arrive."""
        pod = ipaddress.IPv4Address(pod_address)
        network = ipaddress.IPv4Network(self.pod_cidr)
        if pod not in network:
            raise LabError(f"{pod_address} is not in cluster {self.name}'s pod network {self.pod_cidr}")
        twin = ipaddress.IPv4Network(self.loopback_cidr).network_address + (int(pod) - int(network.network_address))
        return str(twin)

    @property
    def logs_dir(self) -> Path:
        return Path(self.dir) / "logs"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "index": self.index, "host": self.host, "api_port": self.api_port,
                "server": self.server, "kubeconfig": self.kubeconfig, "context": self.context,
                "ca": self.ca, "dir": self.dir, "pod_cidr": self.pod_cidr, "ports": dict(self.ports),
                "etcd_data": self.etcd_data, "node_ip": self.node_ip, "egress_socket": self.egress_socket,
                "processes": [p.as_dict() for p in self.processes]}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> LabCluster:
        ports = data.get("ports") or {}
        procs = data.get("processes") or []
        assert isinstance(ports, dict) and isinstance(procs, list)
        return cls(name=str(data["name"]), index=int(str(data["index"])), host=str(data["host"]),
                   api_port=int(str(data["api_port"])), kubeconfig=str(data["kubeconfig"]),
                   context=str(data["context"]), ca=str(data["ca"]), dir=str(data["dir"]),
                   pod_cidr=str(data["pod_cidr"]), ports={str(k): int(v) for k, v in ports.items()},
                   processes=tuple(ProcessRecord.from_dict(p) for p in procs),
                   etcd_data=str(data.get("etcd_data") or ""), node_ip=str(data.get("node_ip") or ""),
                   egress_socket=str(data.get("egress_socket") or ""))

    def with_process(self, record: ProcessRecord) -> LabCluster:
        kept = tuple(p for p in self.processes if p.component != record.component)
        return replace(self, processes=(*kept, record))


@dataclass(frozen=True)
class Lab:
    """A lab: its directory, its clusters in index order, and the merged kubeconfig."""

    dir: Path
    clusters: tuple[LabCluster, ...]

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def __getitem__(self, name: str) -> LabCluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)


def read_lab(lab_dir: Path) -> Lab | None:
    """The lab recorded in `lab_dir`, or None when there is none."""
    path = lab_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise LabError(f"cannot read the lab state {path}: {err}",
                       hint="stop leftovers by hand, then remove the directory") from err
    if data.get("version") != FORMAT_VERSION:
        raise LabError(f"{path} has format version {data.get('version')}, expected {FORMAT_VERSION}",
                       hint="it was written by another fleetplan version; run that version's `lab down`")
    return Lab(lab_dir, tuple(LabCluster.from_dict(c) for c in data["clusters"]))


def write_lab(lab: Lab) -> None:
    """Atomically replace the state file (thread-safe: clusters start in parallel threads)."""
    with _WRITE_LOCK:
        lab.dir.mkdir(parents=True, exist_ok=True)
        tmp = lab.dir / f".{STATE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"version": FORMAT_VERSION,
                                   "clusters": [c.as_dict() for c in lab.clusters]}, indent=2) + "\n")
        os.replace(tmp, lab.dir / STATE_FILE)


class StateRecorder:
    """Collects cluster records from parallel starters and persists each change at once."""

    def __init__(self, lab_dir: Path, clusters: list[LabCluster]) -> None:
        self._lab_dir = lab_dir
        self._clusters = {c.name: c for c in clusters}
        self._order = [c.name for c in clusters]
        self._lock = threading.Lock()

    def update(self, cluster: LabCluster) -> None:
        with self._lock:
            self._clusters[cluster.name] = cluster
            write_lab(self.lab())

    def record_process(self, name: str, record: ProcessRecord) -> None:
        with self._lock:
            self._clusters[name] = self._clusters[name].with_process(record)
            write_lab(self.lab())

    def lab(self) -> Lab:
        return Lab(self._lab_dir, tuple(self._clusters[n] for n in self._order))
