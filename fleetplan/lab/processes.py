"""Launching and stopping the lab's component processes, safely across process boundaries.

Every component runs in its own session (so its process group id equals its pid) with stdout and
stderr appended to a log file. A `ProcessRecord` is what the state file keeps: pid plus the kernel's
start time of that pid, so a later `down` from another process never signals a recycled pid that now
belongs to someone else. Stopping signals the whole process group (SIGTERM, then SIGKILL), which also
ends any helper children a component may have forked.

Popen handles of processes started by this interpreter are kept in a module registry: it stops
Python's "still running" warning when a handle would be collected, and lets `stop` reap the child so
no zombie lingers while the test session runs on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@dataclass(frozen=True)
class ProcessRecord:
    """One running component as written to the state file."""

    component: str
    pid: int
    start_ticks: int  # field 22 of /proc/<pid>/stat: identifies this pid incarnation
    log: str

    def as_dict(self) -> dict[str, object]:
        return {"component": self.component, "pid": self.pid, "start_ticks": self.start_ticks,
                "log": self.log}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ProcessRecord:
        return cls(str(data["component"]), int(str(data["pid"])), int(str(data["start_ticks"])),
                   str(data["log"]))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start ticks) of a pid, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses; the fields after the last ')' are fixed.
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_running(record: ProcessRecord) -> bool:
    """True when the recorded process still exists (not a zombie) and is the same incarnation."""
    _reap(record.pid)
    stat = _stat(record.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == record.start_ticks


def component_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for components: no proxies (everything is loopback), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    env.update(extra or {})
    return env


def spawn(component: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> ProcessRecord:
    """Start a component detached in its own session, logging to `log`; return its record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {component}\n".encode())
        out.flush()
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=dict(env) if env is not None else component_env(), cwd=cwd,
                                 start_new_session=True, close_fds=True)
    _CHILDREN[child.pid] = child
    stat = _stat(child.pid)
    # A process that already died has no stat; record ticks 0 so it simply reads as not running.
    return ProcessRecord(component, child.pid, stat[1] if stat else 0, str(log))


def exit_status(record: ProcessRecord) -> int | None:
    """The exit code of a process this interpreter started, once it has ended."""
    child = _CHILDREN.get(record.pid)
    return child.poll() if child is not None else None


def stop(records: Sequence[ProcessRecord], timeout: float = 20.0) -> list[ProcessRecord]:
    """Stop the given processes' groups: SIGTERM, wait, then SIGKILL. Returns any that survived."""
    live = [r for r in records if is_running(r)]
    for record in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_running(r) for r in live):
        time.sleep(0.1)
    for record in live:
        if is_running(record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(is_running(r) for r in live):
        time.sleep(0.05)
    # Grandchildren left in a group whose leader died are killed too: the group id stays the pid.
    for record in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, signal.SIGKILL)
    return [r for r in live if is_running(r)]


def rss_bytes(record: ProcessRecord) -> int:
    """Resident set size of a running component (0 when it is gone)."""
    if not is_running(record):
        return 0
    try:
        for line in Path(f"/proc/{record.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def log_tail(path: Path | str, lines: int = 30) -> str:
    """The last `lines` lines of a log file, for error messages and failed tests."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
