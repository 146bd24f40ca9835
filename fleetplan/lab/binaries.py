"""Finding the lab's Go-built binaries (made by `lab/build.sh`, cached by version).

Resolution order: an explicit directory, `$FLEETPLAN_LAB_BIN`, then the cache directory that
`lab/build.sh --print` would print, computed from the checkout's `lab/versions.env` the same way
the script does. A directory counts only with its `.complete` stamp and every binary present.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetplan.errors import LabError

REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
_REPO_LAB = Path(__file__).resolve().parents[2] / "lab"


def _versions(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key] = value
    return values


def default_bin_dir() -> Path | None:
    """The directory `lab/build.sh --print` names, when this is a checkout with lab/versions.env."""
    versions_file = _REPO_LAB / "versions.env"
    if not versions_file.is_file():
        return None
    v = _versions(versions_file)
    cache = os.environ.get("FLEETPLAN_LAB_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fleetplan" / "lab")
    key = f"k8s-{v['KUBERNETES_VERSION']}_etcd-{v['ETCD_VERSION']}_kwok-{v['KWOK_VERSION']}"
    return Path(cache) / key / "bin"


def find_bin_dir(explicit: Path | str | None = None) -> Path:
    """The directory holding every lab binary, or a LabError that says how to build them."""
    candidate = explicit or os.environ.get("FLEETPLAN_LAB_BIN") or default_bin_dir()
    hint = "build them with `make lab-bins` (or `bash lab/build.sh`) and set FLEETPLAN_LAB_BIN to its output"
    if candidate is None:
        raise LabError("the lab's binaries were not found (FLEETPLAN_LAB_BIN is not set)", hint=hint)
    bin_dir = Path(candidate)
    missing = [b for b in REQUIRED if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise LabError(f"the lab's binaries are missing in {bin_dir}: {', '.join(missing)}", hint=hint)
    if explicit is None and not os.environ.get("FLEETPLAN_LAB_BIN") and not (bin_dir / ".complete").exists():
        raise LabError(f"the lab's binaries in {bin_dir} are from an unfinished build", hint=hint)
    return bin_dir
