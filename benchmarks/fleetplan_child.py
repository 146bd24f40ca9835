"""The fleetplan CLI with a request counter: `fleetplan_child.py TALLY_FILE ARGS...`.

Runs `fleetplan.cli.main(ARGS)` unchanged, after wrapping `KubeCluster._call` (the one place every
API request goes through) to count requests per cluster and per kind of request: discovery, list,
get, dry-run (server-side apply with dryRun), write (apply, delete, subresources). At exit the
counts and the process's peak RSS go to TALLY_FILE as JSON:
{"requests": {cluster: {kind: count}}, "peak_rss_kib": N}.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from fleetplan.live.clusters import KubeCluster

_COUNTS: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
_LOCK = threading.Lock()
_original = KubeCluster._call


def _kind_of(method: str, path: str, query: Mapping[str, str] | None) -> str:
    if method == "GET":
        parts = path.strip("/").split("/")
        if path == "/api/v1" or (parts[0] == "apis" and len(parts) == 3):
            return "discovery"
        # /api/v1/<plural> or /api/v1/namespaces/<ns>/<plural>: odd length after the version prefix
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        return "list" if len(rest) in (1, 3) else "get"
    if method == "PATCH" and query and query.get("dryRun"):
        return "dry-run"
    return "write"


def _counted(self: KubeCluster, method: str, path: str, query: Mapping[str, str] | None = None,
             **kwargs: Any) -> Any:
    with _LOCK:
        _COUNTS[self.name][_kind_of(method, path, query)] += 1
    return _original(self, method, path, query, **kwargs)


def _peak_rss_kib() -> int:
    """This process's own peak RSS: VmHWM belongs to the address space made by exec, whereas
    rusage's maxrss carries over the parent's high-water mark from fork/vfork."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _dump(target: str) -> None:
    with open(target, "w") as handle:
        json.dump({"requests": {name: dict(kinds) for name, kinds in _COUNTS.items()},
                   "peak_rss_kib": _peak_rss_kib()}, handle)


def main() -> None:
    target, args = sys.argv[1], sys.argv[2:]
    KubeCluster._call = _counted  # type: ignore[method-assign]
    atexit.register(_dump, target)
    from fleetplan.cli import main as fleetplan_main

    fleetplan_main(args)


if __name__ == "__main__":
    main()
