"""Where the state lives: the `StateStore` protocol and the local file store with its lock.

Invariants of `LocalStateStore`:
- Every write is atomic: the new text goes to a temp file in the same directory, is fsynced, and is
  renamed over the state (then the directory is fsynced), so a kill at any instant leaves either
  the old or the new state, never a torn one.
- Before each overwrite the previous content is kept, atomically too, as `<path>.backup`.
- `persist` sets `serial` to one more than the last serial read or written, so serials only grow.
- The lock is a file `<path>.lock` created with O_EXCL holding JSON (id, holder, host, pid, time,
  operation). A second locker gets `LockedError` naming the holder. A lock left by a process that
  no longer runs on this host is taken over (its pid is gone, so it cannot be writing).
"""

from __future__ import annotations

import contextlib
import getpass
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
            _atomic_write(self.backup_path, self.path.read_bytes())
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
        for _ in range(2):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                held = self.lock_info()
                if held is not None and held.host == host and not _pid_alive(held.pid):
                    self.warnings.append(
                        Diagnostic(
                            f"took over the lock left by {held.describe()}: that process no longer runs",
                            severity="warning",
                        )
                    )
                    with contextlib.suppress(FileNotFoundError):
                        self.lock_path.unlink()
                    continue
                who = held.describe() if held else "an unknown holder (unreadable lock file)"
                raise LockedError(
                    f"state {self.path} is locked by {who}",
                    hint="wait for that run to finish; if it is gone, run "
                    f"`fleetplan force-unlock {held.id if held else 'ID'}`",
                ) from None
            with os.fdopen(fd, "w") as handle:
                json.dump(asdict(info), handle)
                handle.flush()
                os.fsync(handle.fileno())
            return info
        raise LockedError(f"state {self.path} is locked and the lock could not be taken over")

    def lock_info(self) -> LockInfo | None:
        try:
            return LockInfo(**json.loads(self.lock_path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def unlock(self, lock_id: str) -> None:
        held = self.lock_info()
        if held is not None and held.id == lock_id:
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()

    def force_unlock(self, lock_id: str) -> LockInfo:
        held = self.lock_info()
        if held is None:
            raise StateError(f"state {self.path} is not locked")
        if held.id != lock_id:
            raise StateError(
                f"lock ID {lock_id} does not match the lock held by {held.describe()}",
                hint=f"run `fleetplan force-unlock {held.id}` if that run is really gone",
            )
        self.lock_path.unlink()
        return held

    @contextlib.contextmanager
    def locked(self, operation: str) -> Iterator[LockInfo]:
        info = self.lock(operation)
        try:
            yield info
        finally:
            self.unlock(info.id)


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
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
