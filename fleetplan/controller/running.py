"""The controller process: leader election, a watch on Fleet resources, a queue, periodic resyncs.

Order of events:
1. Wait to become leader: take the Lease `<namespace>/<lease name>` (`fleetplan.state.leasing`),
   retrying every quarter of its duration; a dead leader's Lease is taken over once it expired.
2. As leader: a thread lists and then watches Fleet resources and queues the key of every resource
   whose generation changed, that is being deleted, or that appeared; the main loop reconciles one
   key at a time and schedules the next reconcile of each after `resync` (drift correction) or
   sooner when the reconcile asked for it.
3. Leadership lost (not renewed within the duration, or taken): stop reconciling and return 1, so
   that the process exits and its supervisor restarts it as a follower. Asked to stop: release the
   Lease (the next leader need not wait for it to expire) and return 0.

Invariants: only the leader reconciles; one reconcile at a time; the key queue holds each key at
most once; events caused by the controller's own status writes (no generation change) are not
queued again, so status writes do not loop.
"""

from __future__ import annotations

import heapq
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fleetplan.controller.reconciling import FLEET_API, Reconciler
from fleetplan.errors import FleetplanError
from fleetplan.live.objects import GoneError, ObjectClient
from fleetplan.state.leasing import LeaseLock
from fleetplan.state.storing import LockInfo

Key = tuple[str, str]  # (namespace, name)
Log = Callable[..., None]


@dataclass(frozen=True)
class Options:
    namespace: str  # where the leader-election Lease lives
    lease_name: str = "fleetplan-controller"
    lease_duration: int = 15
    resync: float = 60.0
    watch_namespace: str = ""  # "" watches every namespace


class KeyQueue:
    """Keys due now, plus keys due later (a heap); each key is held at most once."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Key, float] = {}
        self._heap: list[tuple[float, Key]] = []

    def add(self, key: Key, after: float = 0.0) -> None:
        at = time.monotonic() + after
        with self._cond:
            if key in self._due and self._due[key] <= at:
                return
            self._due[key] = at
            heapq.heappush(self._heap, (at, key))
            self._cond.notify()

    def pop(self, timeout: float) -> Key | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entries
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    return key
                wake = min(deadline, self._heap[0][0]) if self._heap else deadline
                if now >= deadline:
                    return None
                self._cond.wait(max(0.01, wake - now))


class Controller:
    def __init__(self, api: ObjectClient, reconciler: Reconciler, options: Options, log: Log) -> None:
        self.api = api
        self.reconciler = reconciler
        self.options = options
        self.log = log
        self.queue = KeyQueue()
        self.stopping = threading.Event()
        host = socket.gethostname()
        self.identity = LockInfo(id=f"{host}-{uuid.uuid4().hex[:8]}", holder=f"controller@{host}", host=host,
                                 pid=os.getpid(), created=datetime.now(UTC).isoformat(timespec="seconds"),
                                 operation="controller")
        self.lease = LeaseLock(api, options.namespace, options.lease_name, options.lease_duration, self.identity)
        reconciler.still_leading = self.lease.still_held

    def run(self) -> int:
        if not self._become_leader():
            return 0
        self.lease.start_renewing()
        watcher = threading.Thread(target=self._watch, name="watch-fleets", daemon=True)
        watcher.start()
        try:
            while not self.stopping.is_set():
                if not self.lease.still_held():
                    self.log("leadership_lost", identity=self.identity.id)
                    return 1
                key = self.queue.pop(timeout=1.0)
                if key is None or self.stopping.is_set():
                    continue
                self._reconcile(key)
        finally:
            self.stopping.set()
            if self.lease.still_held():
                self.lease.release()
                self.log("leadership_released", identity=self.identity.id)
        return 0

    def stop(self) -> None:
        self.stopping.set()

    def _become_leader(self) -> bool:
        self.log("waiting_for_leadership", identity=self.identity.id, lease=self.options.lease_name)
        while not self.stopping.is_set():
            try:
                taken, previous = self.lease.try_acquire()
            except FleetplanError as err:
                self.log("leader_election_error", message=str(err))
                taken, previous = False, None
            if taken:
                self.log("leading", identity=self.identity.id,
                         took_over=previous.id if previous is not None else None)
                return True
            self.stopping.wait(max(0.5, self.options.lease_duration / 4))
        return False

    def _reconcile(self, key: Key) -> None:
        started = time.monotonic()
        try:
            again = self.reconciler.reconcile(*key)
        except FleetplanError as err:  # e.g. the management cluster was unreachable
            self.log("reconcile_error", fleet=f"{key[0]}/{key[1]}", message=str(err))
            again = self.reconciler.settings.retry_after
        except Exception as err:  # a bug: keep serving the other fleets, say so loudly
            self.log("reconcile_crashed", fleet=f"{key[0]}/{key[1]}", message=f"{type(err).__name__}: {err}")
            again = self.reconciler.settings.retry_after
        self.log("reconcile_done", fleet=f"{key[0]}/{key[1]}", seconds=round(time.monotonic() - started, 2))
        self.queue.add(key, self.options.resync if again is None else min(again, self.options.resync))

    def _watch(self) -> None:
        seen: dict[Key, int] = {}
        ns = self.options.watch_namespace
        while not self.stopping.is_set():
            try:
                items, version = self.api.list(FLEET_API, "Fleet", ns)
                for obj in items:
                    self._offer(obj, seen, listing=True)
                while not self.stopping.is_set():
                    for kind, obj in self.api.watch(FLEET_API, "Fleet", ns, version, timeout_seconds=30):
                        version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                        if kind == "DELETED":
                            seen.pop(_key(obj), None)
                        elif kind in ("ADDED", "MODIFIED"):
                            self._offer(obj, seen, listing=False)
            except GoneError:
                continue  # list again
            except FleetplanError as err:
                self.log("watch_error", message=str(err))
                self.stopping.wait(2.0)

    def _offer(self, obj: dict[str, Any], seen: dict[Key, int], *, listing: bool) -> None:
        key = _key(obj)
        generation = int(obj.get("metadata", {}).get("generation") or 0)
        deleting = bool(obj.get("metadata", {}).get("deletionTimestamp"))
        if listing or deleting or seen.get(key) != generation:
            seen[key] = generation
            self.queue.add(key)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
