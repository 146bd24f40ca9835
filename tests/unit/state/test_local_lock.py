"""The local state lock under contention and damage: one winner when several take over a stale
lock, never an empty lock file after a kill, and unreadable lock files reported and forced open."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetplan.errors import LockedError, StateError
from fleetplan.state import storing
from fleetplan.state.storing import LocalStateStore

ROOT = Path(__file__).resolve().parents[3]
DEAD_PID = 2**22 + 12345  # above the default pid_max: never a running process


def _stale_lock(store: LocalStateStore) -> str:
    """A lock file left by a process that no longer runs; returns its ID."""
    info = store.lock("apply")
    data = json.loads(store.lock_path.read_text())
    store.lock_path.write_text(json.dumps({**data, "pid": DEAD_PID}))
    return info.id


def test_only_one_thread_takes_over_a_stale_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.json"
    stale = _stale_lock(LocalStateStore(path))
    real = storing._pid_alive

    def slow_pid_alive(pid: int) -> bool:
        time.sleep(0.05)  # widens the window between judging the lock stale and replacing it
        return real(pid)

    monkeypatch.setattr(storing, "_pid_alive", slow_pid_alive)
    contenders = 8
    barrier = threading.Barrier(contenders)
    won: list[str] = []
    lost: list[str] = []

    def contend() -> None:
        store = LocalStateStore(path)
        barrier.wait()
        try:
            won.append(store.lock("apply").id)
        except LockedError as err:
            lost.append(str(err))

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 1, (won, lost)
    assert len(lost) == contenders - 1
    held = LocalStateStore(path).lock_info()
    assert held is not None and held.id == won[0] != stale
    assert all(f"lock ID {won[0]}" in message for message in lost), lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json.lock", "s.json.lock.guard"]


_CONTENDER = """
import sys, time
from fleetplan.errors import LockedError
from fleetplan.state.storing import LocalStateStore
store = LocalStateStore(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
try:
    info = store.lock("apply")
except LockedError:
    print("locked", flush=True)
else:
    print("won", info.id, flush=True)
    time.sleep(4)  # hold it (a winner that exits at once would leave a stale lock to take over)
"""


def test_only_one_process_takes_over_a_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    _stale_lock(LocalStateStore(path))
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", _CONTENDER, str(path), str(start)], text=True,
                              stdout=subprocess.PIPE, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
             for _ in range(6)]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    winners = [out[1] for out in outputs if out and out[0] == "won"]
    assert len(winners) == 1, outputs
    assert sum(1 for out in outputs if out == ["locked"]) == 5, outputs


_KILLED_WHILE_LOCKING = """
import os, signal, sys
from fleetplan.state.storing import LocalStateStore
os.fdopen = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)  # dies while writing the lock
LocalStateStore(sys.argv[1]).lock("apply")
"""


def test_a_kill_while_writing_the_lock_leaves_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    done = subprocess.run([sys.executable, "-c", _KILLED_WHILE_LOCKING, str(path)], timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = LocalStateStore(path)
    assert not store.lock_path.exists()
    store.lock("apply")  # free, and the dead locker's temp file is swept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json.lock"]


@pytest.mark.parametrize("content", [b"", b"{\"id\": \"abc\", \"pi", b"\x00\x01 not json"])
def test_an_unreadable_lock_is_reported_and_forced_open_by_the_shown_id(tmp_path: Path, content: bytes) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    store.lock_path.write_bytes(content)
    with pytest.raises(LockedError, match="unreadable lock file") as caught:
        store.lock("apply")
    diag = caught.value.diagnostics[0]
    assert ("empty" in diag.summary) == (content == b"")
    assert diag.hint is not None
    lock_id = diag.hint.split("force-unlock ", 1)[1].rstrip("`")
    assert lock_id.startswith("unreadable-") and lock_id in diag.summary
    with pytest.raises(StateError, match=f"does not match.*{lock_id}"):
        store.force_unlock("unreadable-000000000000")
    assert store.force_unlock(lock_id).id == lock_id
    assert not store.lock_path.exists()
    store.lock("apply")
    with pytest.raises(StateError, match="not locked"):
        LocalStateStore(tmp_path / "t.json").force_unlock(lock_id)


def test_a_live_holder_is_never_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    held = LocalStateStore(path).lock("apply")
    with pytest.raises(LockedError, match=f"lock ID {held.id}"):
        LocalStateStore(path).lock("apply")
    assert LocalStateStore(path).lock_info() == held
