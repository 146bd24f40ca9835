"""Run one command as a child process and measure it: wall time, CPU time, peak RSS, exit code.

CPU time comes from `wait4`'s rusage of the child, which covers the child and every descendant it
waited for (for the kubectl baseline: bash and each kubectl), so it is the process's own,
unaffected by this harness or the latency proxies running in the parent. rusage's peak RSS is not
usable: Linux carries the parent's high-water mark into a forked child across exec, so every child
would report at least the harness's size.

fleetplan runs through `fleetplan_child.py`, the real CLI with a counter on `KubeCluster._call`,
which writes the requests made to each cluster (by kind of request) and its own peak RSS (VmHWM)
to a JSON file.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float  # user + system
    peak_rss_mib: float  # from rusage (inflated by the parent, see above) except for fleetplan runs
    exit_code: int
    output: str = ""  # stdout + stderr tail, for diagnosing a failure
    requests: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # cluster -> kind -> count


def measure(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None,
            timeout: float = 3600.0) -> Measurement:
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env) if env else None, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.005)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
        out.seek(0)
        text = out.read().decode(errors="replace")
    return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0,
                       os.waitstatus_to_exitcode(status), text[-4000:])


def processes_cpu_s(marker: str) -> float:
    """CPU time (user + system, seconds) used so far by the live processes whose command line
    contains `marker` (the lab's directory: its API servers, etcds, controllers, kwok)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() not in handle.read():
                    continue
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total / tick


def self_cpu_s() -> float:
    """CPU time of this process (the harness and the latency proxies' threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fleetplan_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("FLEETPLAN_DEBUG", None)
    return env


def measure_fleetplan(args: Sequence[str], cwd: Path, timeout: float = 3600.0) -> Measurement:
    """Run `fleetplan ARGS` (through the counting wrapper) in `cwd`."""
    with tempfile.TemporaryDirectory() as tmp:
        tally = Path(tmp) / "requests.json"
        argv = [sys.executable, str(HERE / "fleetplan_child.py"), str(tally), *args]
        result = measure(argv, cwd, fleetplan_env(), timeout)
        tallied = json.loads(tally.read_text()) if tally.exists() else {}
    if result.exit_code == 0 and not tallied.get("peak_rss_kib"):
        raise RuntimeError(f"fleetplan {' '.join(args)} wrote no peak RSS:\n{result.output}")
    return Measurement(result.wall_s, result.cpu_s, tallied.get("peak_rss_kib", 0) / 1024.0, result.exit_code,
                       result.output, tallied.get("requests", {}))
