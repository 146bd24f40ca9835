"""`up`, `down` and `status` of a whole lab, driven by its state directory.

`up` plans every cluster (names `<prefix>1..N`, loopback 127.0.<i>.1, free ports), records the plan,
then starts the clusters in parallel threads; if any cluster fails, everything already started is
stopped and one error carries every failure with log tails. `down` and `status` need nothing but
the directory, so they work from any process. Logs stay in the directory after `down`.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fleetplan.errors import Diagnostic, LabError
from fleetplan.lab import components as comp
from fleetplan.lab.binaries import find_bin_dir
from fleetplan.lab.clusters import COMPONENTS, ClusterStarter, plan_cluster
from fleetplan.lab.indices import claim, release
from fleetplan.lab.processes import is_running, rss_bytes, stop
from fleetplan.lab.rest import LabRest
from fleetplan.lab.state import STATE_FILE, Lab, LabCluster, StateRecorder, default_dir, read_lab, write_lab

DEFAULT_TIMEOUT = 300.0  # per cluster; 2 shared cores start ~15 Go processes at once


def _shm_root(lab_dir: Path) -> Path | None:
    """A short tmpfs directory for the egress sockets, unique per user and lab directory."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    digest = hashlib.sha256(str(lab_dir).encode()).hexdigest()[:10]
    return shm / f"fleetplan-lab-{getpass.getuser()}-{digest}"


def _write_merged_kubeconfig(lab: Lab) -> None:
    entries = []
    for cluster in lab.clusters:
        pki = Path(cluster.dir) / "pki"
        entries.append((cluster.name, cluster.server, (pki / "ca.crt").read_bytes(),
                        (pki / "admin.crt").read_bytes(), (pki / "admin.key").read_bytes()))
    comp.write_kubeconfig(lab.kubeconfig, comp.kubeconfig(entries, lab.clusters[0].name))


def running_processes(lab: Lab) -> int:
    return sum(1 for c in lab.clusters for p in c.processes if is_running(p))


def up(clusters: int = 3, prefix: str = "c", lab_dir: Path | str | None = None, *, first_index: int | None = None,
       timeout: float = DEFAULT_TIMEOUT, bin_dir: Path | str | None = None) -> Lab:
    """Start `clusters` clusters named `<prefix>1..N` and return the running lab.

    Cluster indices (and so addresses) are the lowest ones no other lab holds, or exactly
    `first_index`.. when given (an error if another lab holds one of them).
    """
    if clusters < 1:
        raise LabError("--clusters must be at least 1")
    lab_dir = Path(lab_dir).absolute() if lab_dir is not None else default_dir()
    bins = find_bin_dir(bin_dir)
    old = read_lab(lab_dir)
    if old is not None:
        if running_processes(old):
            raise LabError(f"a lab is already running in {lab_dir}",
                           hint=f"use it, or stop it first: fleetplan lab down --dir {lab_dir}")
        _clean(old)
    shm = _shm_root(lab_dir)
    planned = []
    indices = claim(lab_dir, clusters, first_index)
    try:
        for i, index in enumerate(indices):
            name = f"{prefix}{i + 1}"
            shutil.rmtree(lab_dir / name, ignore_errors=True)
            planned.append(plan_cluster(name, index, lab_dir, shm))
        recorder = StateRecorder(lab_dir, planned)
        write_lab(recorder.lab())
    except BaseException:
        release(lab_dir)
        raise
    starters = [ClusterStarter(c, bins, recorder.record_process, timeout) for c in planned]
    errors: list[Diagnostic] = []
    try:
        with ThreadPoolExecutor(max_workers=clusters) as pool:
            futures = [pool.submit(s.start) for s in starters]
            for future, starter in zip(futures, starters, strict=True):
                try:
                    recorder.update(future.result())
                except LabError as err:
                    errors.extend(err.diagnostics)
                except OSError as err:  # e.g. an unwritable directory or a binary that cannot run
                    errors.append(Diagnostic(f"cluster {starter.cluster.name} did not start: {err}"))
    except BaseException:
        with contextlib.suppress(Exception):
            down(lab_dir)
        raise
    lab = recorder.lab()
    if errors:
        with contextlib.suppress(LabError):
            down(lab_dir)
        raise LabError(errors)
    _write_merged_kubeconfig(lab)
    return lab


def _clean(lab: Lab) -> None:
    """Remove what a stopped lab leaves besides logs: etcd data on tmpfs, state, merged kubeconfig."""
    for cluster in lab.clusters:
        if cluster.egress_socket:
            with contextlib.suppress(FileNotFoundError):
                Path(cluster.egress_socket).unlink()
            with contextlib.suppress(OSError):
                Path(cluster.egress_socket).parent.rmdir()  # the per-lab tmpfs directory, once empty
        if cluster.etcd_data:
            shutil.rmtree(cluster.etcd_data, ignore_errors=True)
    for path in (lab.dir / STATE_FILE, lab.kubeconfig):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    release(lab.dir)


def down(lab_dir: Path | str | None = None, timeout: float = 20.0) -> int:
    """Stop every process the lab in `lab_dir` started; return how many were running."""
    lab_dir = Path(lab_dir).absolute() if lab_dir is not None else default_dir()
    lab = read_lab(lab_dir)
    if lab is None:
        return 0
    records = [p for c in lab.clusters for p in c.processes]
    was_running = sum(1 for p in records if is_running(p))
    survivors = stop(records, timeout)
    if survivors:
        raise LabError(f"{len(survivors)} lab processes did not stop: "
                       + ", ".join(f"{r.component} pid {r.pid}" for r in survivors),
                       hint="check for a process stuck in the kernel (state D) and kill it by pid")
    _clean(lab)
    return was_running


@dataclass(frozen=True)
class ClusterStatus:
    """What `status` found for one cluster."""

    cluster: LabCluster
    components: dict[str, bool]
    api_ready: bool
    rss_bytes: int

    @property
    def up(self) -> bool:
        return self.api_ready and all(self.components.values())


@dataclass(frozen=True)
class LabStatus:
    lab: Lab
    clusters: tuple[ClusterStatus, ...]

    @property
    def up(self) -> bool:
        return bool(self.clusters) and all(c.up for c in self.clusters)

    @property
    def rss_bytes(self) -> int:
        return sum(c.rss_bytes for c in self.clusters)


def status(lab_dir: Path | str | None = None) -> LabStatus | None:
    """The state of the lab in `lab_dir` (None when there is none), probing each API server."""
    lab_dir = Path(lab_dir).absolute() if lab_dir is not None else default_dir()
    lab = read_lab(lab_dir)
    if lab is None:
        return None
    found = []
    for cluster in lab.clusters:
        procs = {p.component: p for p in cluster.processes}
        running = {c: (c in procs and is_running(procs[c])) for c in COMPONENTS}
        ready = running["kube-apiserver"] and LabRest(cluster.host, cluster.api_port, cluster.ca,
                                                      timeout=5).healthy()
        found.append(ClusterStatus(cluster, running, ready, sum(rss_bytes(p) for p in cluster.processes)))
    return LabStatus(lab, tuple(found))


def wait_until_up(lab_dir: Path | str | None = None, timeout: float = 60.0) -> LabStatus | None:
    """Status of a lab, retrying briefly: an API server may answer /readyz=500 for a moment."""
    deadline = time.monotonic() + timeout
    while True:
        found = status(lab_dir)
        if found is None or found.up or time.monotonic() >= deadline:
            return found
        if not all(all(c.components.values()) for c in found.clusters):
            return found  # a process is gone: waiting will not help
        time.sleep(1.0)
