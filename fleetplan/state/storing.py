"""Where the state lives: the `StateStore` protocol and the local file store with its lock.

Invariants of `LocalStateStore`:
- Every write is atomic: the new text goes to a temp file in the same directory, is fsynced, and is
  renamed over the state (then the directory is fsynced), so a kill at any instant leaves either
  the old or the new state, never a torn one.
- Before each overwrite the previous content is kept, atomically too, as `<path>.backup`.
- `persist` sets `serial` to one more than the last serial read or written, so serials only grow.
- The lock is a file `<path>.lock` holding JSON (id, holder, host, pid, time, operation). It is
  written to a temp file first and hard-linked into place, so it appears whole or not at all
  (never empty, never half written). A second locker gets `LockedError` naming the holder.
- A lock left by a process that no longer runs on this host is taken over (its pid is gone, so it
  cannot be writing), by exactly one contender: takeovers (and force-unlocks) run under an flock
  on `<path>.lock.guard`, move the stale file aside under a unique name, check it is the lock that
  was judged stale, and only then link theirs.
- A lock file that cannot be parsed (left by an older version, damaged on disk) is reported with
  the ID `unreadable-<hash of its bytes>`, which `force-unlock` accepts.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import hashlib
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from fleetplan.errors import Diagnostic, LockedError, StateError
from fleetplan.state import model


@dataclass(frozen=True)
class LockInfo:
    id: str
    holder: str  # user@host
    host: str
    pid: int
    created: str
    operation: str

    def describe(self) -> str:
        return f"{self.holder} (pid {self.pid}, {self.operation}) since {self.created}, lock ID {self.id}"


class StateStore(Protocol):
    def read(self) -> model.State | None: ...
    def persist(self, state: model.State) -> model.State: ...
    def lock(self, operation: str) -> LockInfo: ...
    def unlock(self, lock_id: str) -> None: ...
    def force_unlock(self, lock_id: str) -> LockInfo: ...


class LocalStateStore:
    """A JSON state file with a sibling backup and lock file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".backup")
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._serial: int | None = None
        self.warnings: list[Diagnostic] = []

    # -- reading and writing -------------------------------------------------------------------

    def read(self) -> model.State | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            self._serial = 0
            return None
        except OSError as err:
            raise StateError(f"cannot read state {self.path}: {err.strerror}") from err
        if not text.strip():
            raise StateError(
                f"state {self.path} is empty (truncated?)",
                hint=f"restore it from {self.backup_path} if that holds the last good state",
            )
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise StateError(
                f"state {self.path} is not valid JSON at line {err.lineno} column {err.colno} "
                "(truncated or edited by hand?)",
                hint=f"restore it from {self.backup_path} if that holds the last good state",
            ) from err
        state = model.from_dict(data, source=str(self.path))
        self._serial = state.serial
        return state

    def persist(self, state: model.State) -> model.State:
        if self._serial is None:
            self.read()
        written = replace(state, serial=max(self._serial or 0, state.serial) + 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            _keep_as_backup(self.path, self.backup_path)
        _atomic_write(self.path, model.dumps(written).encode())
        self._serial = written.serial
        return written

    # -- locking -------------------------------------------------------------------------------

    def lock(self, operation: str) -> LockInfo:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        info = LockInfo(
            id=str(uuid.uuid4()),
            holder=f"{_user()}@{host}",
            host=host,
            pid=os.getpid(),
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            operation=operation,
        )
        payload = json.dumps(asdict(info)).encode()
        self._sweep_lock_temps()
        if self._link_lock(payload):
            return info
        with self._takeover_guard():
            # Inside the guard no other takeover or force-unlock runs, and a fresh locker cannot
            # replace an existing file, so what is read here stays in place until renamed below.
            held, raw = self._read_lock()
            if raw is None:  # released meanwhile
                if self._link_lock(payload):
                    return info
                held, raw = self._read_lock()
            if raw is not None and held is None:
                raise self._locked_error(None, raw)
            if held is not None and held.host == host and not _pid_alive(held.pid):
                if self._take_over(held, payload):
                    return info
                held, raw = self._read_lock()
            raise self._locked_error(held, raw)

    def _take_over(self, stale: LockInfo, payload: bytes) -> bool:
        """Move the stale lock aside under a unique name, check it is the one judged stale, and
        link ours in its place. False when a fresh locker got in first (it holds the lock)."""
        grave = self.lock_path.with_name(f".{self.lock_path.name}.stale-{uuid.uuid4().hex}")
        try:
            os.rename(self.lock_path, grave)
        except FileNotFoundError:
            return self._link_lock(payload)
        try:
            moved = _parse_lock(grave.read_bytes())
            if moved is None or moved.id != stale.id:  # not what was judged: put it back
                with contextlib.suppress(FileExistsError):
                    os.link(grave, self.lock_path)
                return False
            if not self._link_lock(payload):
                return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                grave.unlink()
        self.warnings.append(
            Diagnostic(f"took over the lock left by {stale.describe()}: that process no longer runs",
                       severity="warning")
        )
        return True

    def _link_lock(self, payload: bytes) -> bool:
        """Create the lock file whole: write a private temp file, then hard-link it into place
        (atomic, fails if a lock exists), so a lock file is never seen empty or half written."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.lock_path.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=self.lock_path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, self.lock_path)
            except FileExistsError:
                return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(self.lock_path.parent)
        return True

    def _sweep_lock_temps(self) -> None:
        """Remove lock temp files left by lockers killed before they linked them (pid dead)."""
        prefix = f".{self.lock_path.name}."
        for leftover in self.lock_path.parent.glob(prefix + "*.tmp"):
            pid = leftover.name[len(prefix):].split(".", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()

    @contextlib.contextmanager
    def _takeover_guard(self) -> Iterator[None]:
        """An exclusive flock on `<lock>.guard`, held while a lock is taken over or forced open.

        The kernel drops it when its holder dies, so it can never go stale; the file itself stays
        (removing a file others may be about to flock would let two holders in)."""
        guard = self.lock_path.with_name(self.lock_path.name + ".guard")
        fd = os.open(guard, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _read_lock(self) -> tuple[LockInfo | None, bytes | None]:
        """(the parsed lock or None if unreadable, the raw bytes or None if there is no lock)."""
        try:
            raw = self.lock_path.read_bytes()
        except FileNotFoundError:
            return None, None
        return _parse_lock(raw), raw

    def _locked_error(self, held: LockInfo | None, raw: bytes | None) -> LockedError:
        if held is None and raw is None:
            return LockedError(f"state {self.path} is locked and the lock could not be taken over")
        if held is None:
            assert raw is not None
            lock_id = _unreadable_id(raw)
            return LockedError(
                f"state {self.path} is locked by an unreadable lock file {self.lock_path} "
                f"({'empty' if not raw.strip() else 'not a fleetplan lock'}; lock ID {lock_id})",
                hint=f"if no fleetplan run is using this state, run `fleetplan force-unlock {lock_id}`",
            )
        return LockedError(
            f"state {self.path} is locked by {held.describe()}",
            hint=f"wait for that run to finish; if it is gone, run `fleetplan force-unlock {held.id}`",
        )

    def lock_info(self) -> LockInfo | None:
        return self._read_lock()[0]

    def unlock(self, lock_id: str) -> None:
        held = self.lock_info()
        if held is not None and held.id == lock_id:
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()

    def force_unlock(self, lock_id: str) -> LockInfo:
        """Remove the lock with ID `lock_id`; an unreadable lock file has the ID its error shows
        (`unreadable-<hash of its bytes>`), so only the very file that was reported is removed."""
        with self._takeover_guard():
            held, raw = self._read_lock()
            if raw is None:
                raise StateError(f"state {self.path} is not locked")
            shown = held.id if held is not None else _unreadable_id(raw)
            if shown != lock_id:
                what = held.describe() if held is not None else f"an unreadable lock file (lock ID {shown})"
                raise StateError(
                    f"lock ID {lock_id} does not match the lock held by {what}",
                    hint=f"run `fleetplan force-unlock {shown}` if that run is really gone",
                )
            self.lock_path.unlink()
        return held or LockInfo(id=shown, holder="an unreadable lock file", host="", pid=0, created="unknown",
                                operation="unknown")

    @contextlib.contextmanager
    def locked(self, operation: str) -> Iterator[LockInfo]:
        info = self.lock(operation)
        try:
            yield info
        finally:
            self.unlock(info.id)


def _keep_as_backup(path: Path, backup: Path) -> None:
    """Make the current state file the backup without copying it.

    A hard link to the current file's inode is swapped in as `backup` atomically; the write that
    follows renames a new inode over `path`, so the backup keeps the old content (already fsynced
    when it was written). The directory fsync of that write makes both renames durable. Where hard
    links are not supported, the content is copied as before.
    """
    tmp = backup.with_name(f".{backup.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        os.link(path, tmp)
    except FileNotFoundError:
        raise
    except OSError:
        _atomic_write(backup, path.read_bytes())
        return
    try:
        os.replace(tmp, backup)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _parse_lock(raw: bytes) -> LockInfo | None:
    try:
        return LockInfo(**json.loads(raw))
    except (ValueError, TypeError):
        return None


def _unreadable_id(raw: bytes) -> str:
    return "unreadable-" + hashlib.sha256(raw).hexdigest()[:12]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
