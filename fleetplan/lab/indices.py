"""Choosing cluster indices so that several labs can run side by side on one machine.

A cluster's index i fixes its addresses: API server and controllers on 127.0.i.1, pods in
10.i.0.0/16, and the loopback twins 127.i.0.0/16 that test-side servers bind. Two labs sharing an
index would compete for those twins (a webhook simulator on 127.1.255.254:10349 in each), so every
lab claims its indices in a per-user registry under the system temp directory:

    <tmp>/fleetplan-lab-<uid>/lock          flock held only while choosing
    <tmp>/fleetplan-lab-<uid>/claims/<i>    the absolute lab directory that holds index i

A claim is honoured while its lab directory still lists that index and either has a running
process or was claimed less than ten minutes ago (a lab that is still starting). Anything else is
stale (a lab killed without `down`) and is reclaimed. An index is also taken when something already
listens on 127.0.i.1, which covers labs started by older code or by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fleetplan.errors import LabError
from fleetplan.lab.processes import is_running
from fleetplan.lab.state import read_lab

MAX_INDEX = 254
_STARTING_GRACE = 600.0


def registry_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"fleetplan-lab-{os.getuid()}"


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    root = registry_dir()
    (root / "claims").mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(root / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root / "claims"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def listening_indices() -> set[int]:
    """Indices i with a TCP listener on 127.0.i.1 (from /proc/net/tcp)."""
    found: set[int] = set()
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A":  # LISTEN
            address = fields[1].split(":")[0]
            # Little-endian hex: 127.0.i.1 reads "01" + hex(i) + "00" + "7F".
            if len(address) == 8 and address.startswith("01") and address.endswith("007F"):
                found.add(int(address[2:4], 16))
    return found


def _claim_is_live(path: Path) -> bool:
    try:
        lab_dir = Path(path.read_text().strip())
        age = time.time() - path.stat().st_mtime
        lab = read_lab(lab_dir)
    except (OSError, LabError):
        return False
    if lab is None:  # claimed, state not written yet: a lab that is just starting
        return age < _STARTING_GRACE and lab_dir.exists()
    if all(c.index != int(path.name) for c in lab.clusters):
        return False
    return age < _STARTING_GRACE or any(is_running(p) for c in lab.clusters for p in c.processes)


def claim(lab_dir: Path, count: int, first: int | None = None) -> list[int]:
    """Claim `count` indices for `lab_dir`: exactly first..first+count-1 if given, else the lowest free."""
    with _locked() as claims:
        taken = listening_indices()
        for path in claims.iterdir():
            if not path.name.isdigit():
                continue
            owner = path.read_text().strip() if path.exists() else ""
            if owner == str(lab_dir):
                path.unlink()  # our own earlier claim: this `up` replaces it
            elif _claim_is_live(path):
                taken.add(int(path.name))
            else:
                path.unlink(missing_ok=True)
        if first is not None:
            wanted = list(range(first, first + count))
            if wanted[-1] > MAX_INDEX:
                raise LabError(f"cluster indices {first}..{wanted[-1]} exceed {MAX_INDEX}",
                               hint="use fewer clusters or a lower --first-index")
            clash = sorted(set(wanted) & taken)
            if clash:
                raise LabError(f"cluster indices {clash} are used by another lab",
                               hint="omit --first-index to pick free indices")
        else:
            wanted = [i for i in range(1, MAX_INDEX + 1) if i not in taken][:count]
            if len(wanted) < count:
                raise LabError(f"no {count} free cluster indices are left",
                               hint="stop other labs with `fleetplan lab down --dir ...`")
        for index in wanted:
            (claims / str(index)).write_text(f"{lab_dir}\n")
        return wanted


def release(lab_dir: Path) -> None:
    """Drop every claim held by `lab_dir`."""
    with _locked() as claims:
        for path in claims.iterdir():
            with contextlib.suppress(OSError):
                if path.read_text().strip() == str(lab_dir):
                    path.unlink()
