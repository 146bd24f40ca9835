"""A private per-process directory for the credential files the kubernetes client writes.

The client turns `certificate-authority-data`, `client-certificate-data` and `client-key-data`
(and certificates printed by an exec plugin) into files, because Python's `ssl` loads keys only
from files. Left to itself it puts them in `$TMPDIR` and removes them only at interpreter exit, so
every SIGKILL or OOM kill leaves private keys behind. Here they go to one directory per process:

    <base>/fleetplan-<uid>/<pid>-<random>/    base: $XDG_RUNTIME_DIR if it is private to this
                                              user, else the temp dir ($TMPDIR, /tmp)

Invariants:
- Both directories are mode 0700, owned by this user and not symlinks (checked after creation; a
  parent that another user owns or that is a symlink is refused, never used). Files inside are
  created by `mkstemp` (0600), so no key is ever group or world readable.
- A process directory holds an exclusive flock on its `.alive` file for the life of the process;
  the kernel drops it when the process dies however it dies, so a sweep can tell a dead owner
  without trusting pids (reuse, pid namespaces sharing one /tmp).
- The directory is removed at exit; the first use in each process sweeps the directories of dead
  processes (SIGKILLed, OOM killed, power cut before a reboot kept /tmp).
- A forked child gets its own directory and never removes its parent's.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from fleetplan.errors import ClusterError

ALIVE = ".alive"

_lock = threading.Lock()
_mine: dict[int, tuple[Path, int]] = {}  # pid -> (its directory, fd holding the .alive flock)


def private_dir() -> Path:
    """This process's private directory, created (and dead processes' swept) on first use."""
    pid = os.getpid()
    with _lock:
        if pid not in _mine:
            parent = _parent_dir()
            sweep(parent)
            directory = Path(tempfile.mkdtemp(prefix=f"{pid}-", dir=parent))  # 0700, unique
            fd = os.open(directory / ALIVE, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _mine[pid] = (directory, fd)
            atexit.register(_remove, pid)
        return _mine[pid][0]


def base_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError):
            info = os.lstat(runtime)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
                return Path(runtime)
    return Path(tempfile.gettempdir())


def sweep(parent: Path) -> list[Path]:
    """Remove the directories under `parent` whose process is gone; returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except FileNotFoundError:
        return removed
    own = {d for d, _ in _mine.values()}
    for entry in entries:
        if entry in own or not _is_private_dir(entry):
            continue
        if _owner_gone(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _owner_gone(directory: Path) -> bool:
    try:
        fd = os.open(directory / ALIVE, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        # made by mkdtemp but its owner died (or is about to lock) before `.alive`: judge by pid
        pid = directory.name.split("-", 1)[0]
        return pid.isdigit() and not _pid_alive(int(pid))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its process holds the lock: alive
    finally:
        os.close(fd)
    return True


def _parent_dir() -> Path:
    parent = base_dir() / f"fleetplan-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(parent, 0o700)
    info = os.lstat(parent)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ClusterError(
            f"{parent} is not a directory of this user (a symlink, or made by someone else); "
            "refusing to keep kubeconfig credentials there",
            hint="remove it, or point TMPDIR at a private directory",
        )
    if info.st_mode & 0o077:
        os.chmod(parent, 0o700)
    return parent


def _is_private_dir(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def _remove(pid: int) -> None:
    if os.getpid() != pid:  # a forked child runs its parent's atexit hooks: not its directory
        return
    directory, fd = _mine.pop(pid)
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
