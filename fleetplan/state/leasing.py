"""A lock kept as a `coordination.k8s.io/v1` Lease that expires when its holder stops renewing it.

Used for the `kubernetes` state backend's lock and for the controller's leader election.

Invariants:
- Taking, renewing and releasing are compare-and-swap writes (create, or replace carrying the read
  resourceVersion), so of two contenders exactly one wins; the loser sees who holds the Lease.
- `spec.holderIdentity` is the lock ID (what `force-unlock ID` names) and the annotation
  `fleetplan.dev/lock` carries the holder's `LockInfo` (user@host, pid, operation, time).
- A Lease counts as held until `renewTime + leaseDurationSeconds`; after that anyone may take it
  over (the holder is presumed dead). Time is compared on this machine's clock, so holders and
  contenders must have clocks within a small fraction of the duration of each other.
- The holder renews every third of the duration from a daemon thread. When it cannot renew for a
  whole duration, or sees another holder, `lost` is set and the holder must stop writing.
- This module speaks to the cluster only through the `Objects` protocol, which
  `fleetplan.live.objects.ObjectClient` satisfies; it never imports a client itself.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Protocol

from fleetplan.state.storing import LockInfo

LEASE_API = "coordination.k8s.io/v1"
LOCK_ANNOTATION = "fleetplan.dev/lock"
Obj = dict[str, Any]


class Objects(Protocol):
    """What the Kubernetes-backed state needs from a cluster (see `fleetplan.live.objects`)."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None: ...
    def list(
        self, api_version: str, kind: str, namespace: str = "", label_selector: str = ""
    ) -> tuple[list[Obj], str]: ...
    def create(self, body: Mapping[str, Any]) -> Obj | None: ...
    def replace(self, body: Mapping[str, Any]) -> Obj | None: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> bool: ...


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def holder_of(lease: Obj | None) -> LockInfo | None:
    """The LockInfo of whoever holds `lease` (expired or not); None when it is free."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return None
    raw = ((lease or {}).get("metadata", {}).get("annotations") or {}).get(LOCK_ANNOTATION)
    try:
        info = LockInfo(**json.loads(raw)) if raw else None
    except (ValueError, TypeError):
        info = None
    if info is None or info.id != holder:  # written by another tool: still a holder
        return LockInfo(id=holder, holder=holder, host="?", pid=0, created=spec.get("acquireTime", ""),
                        operation="unknown")
    return info


def expires_at(lease: Obj | None) -> float | None:
    spec = (lease or {}).get("spec") or {}
    renewed = _parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return None
    return renewed + duration


def is_expired(lease: Obj | None, now: float | None = None) -> bool:
    ends = expires_at(lease)
    return ends is not None and (time.time() if now is None else now) > ends


class LeaseLock:
    """One holder's handle on a named Lease."""

    def __init__(self, api: Objects, namespace: str, name: str, duration: int, info: LockInfo) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.duration = max(1, duration)
        self.info = info
        self.lost = threading.Event()
        self._lease: Obj | None = None
        self._renewed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    # -- taking and giving back ----------------------------------------------------------------

    def try_acquire(self) -> tuple[bool, LockInfo | None]:
        """(True, previous holder if an expired lease was taken over) or (False, current holder)."""
        now = time.time()
        lease = self.api.get(LEASE_API, "Lease", self.namespace, self.name)
        if lease is None:
            made = self.api.create(self._body(None, now, transitions=0))
            if made is None:  # someone created it first
                return False, holder_of(self.api.get(LEASE_API, "Lease", self.namespace, self.name))
            self._held(made, now)
            return True, None
        current = holder_of(lease)
        if current is not None and current.id == self.info.id:
            return self.renew(), None
        if current is not None and not is_expired(lease, now):
            return False, current
        transitions = int((lease.get("spec") or {}).get("leaseTransitions") or 0) + 1
        taken = self.api.replace(self._body(lease, now, transitions=transitions))
        if taken is None:
            return False, holder_of(self.api.get(LEASE_API, "Lease", self.namespace, self.name))
        self._held(taken, now)
        return True, current

    def renew(self) -> bool:
        """Push renewTime forward; False (and `lost` set) when the Lease is no longer ours."""
        with self._mutex:
            now = time.time()
            lease = self.api.get(LEASE_API, "Lease", self.namespace, self.name)
            holder = holder_of(lease)
            if lease is None or holder is None or holder.id != self.info.id:
                self.lost.set()
                return False
            body = dict(lease)
            body["spec"] = {**lease.get("spec", {}), "renewTime": _micro_time(now),
                            "leaseDurationSeconds": self.duration}
            renewed = self.api.replace(body)
            if renewed is None:
                return False  # a concurrent write (another renewal, or force-unlock); retried next tick
            self._held(renewed, now)
            return True

    def release(self) -> None:
        """Give the Lease back (only if still ours) so the next holder need not wait for expiry."""
        self.stop_renewing()
        with self._mutex:
            lease = self.api.get(LEASE_API, "Lease", self.namespace, self.name)
            holder = holder_of(lease)
            if lease is None or holder is None or holder.id != self.info.id:
                return
            self.api.replace(_freed(lease))

    def force_release(self, lock_id: str) -> LockInfo | None:
        """Free the Lease if `lock_id` holds it; returns that holder, None if free or another ID."""
        lease = self.api.get(LEASE_API, "Lease", self.namespace, self.name)
        holder = holder_of(lease)
        if lease is None or holder is None or holder.id != lock_id:
            return None
        return holder if self.api.replace(_freed(lease)) is not None else None

    def current(self) -> tuple[LockInfo | None, bool]:
        """(holder, expired) as the cluster has it now."""
        lease = self.api.get(LEASE_API, "Lease", self.namespace, self.name)
        return holder_of(lease), is_expired(lease)

    # -- renewal -------------------------------------------------------------------------------

    def start_renewing(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.duration)
        self._thread = None

    def still_held(self) -> bool:
        """True while the Lease is ours and was renewed within its duration."""
        return not self.lost.is_set() and time.time() < self._renewed_at + self.duration

    def _renew_loop(self) -> None:
        interval = self.duration / 3
        while not self._stop.wait(interval):
            with contextlib.suppress(Exception):  # transient API failures: retried next tick
                self.renew()
            if self.lost.is_set():
                return
            if time.time() >= self._renewed_at + self.duration:
                self.lost.set()
                return

    # -- bodies --------------------------------------------------------------------------------

    def _held(self, lease: Obj, now: float) -> None:
        self._lease = lease
        self._renewed_at = now
        self.lost.clear()

    def _body(self, lease: Obj | None, now: float, *, transitions: int) -> Obj:
        meta: Obj = dict((lease or {}).get("metadata") or {"name": self.name, "namespace": self.namespace})
        meta["annotations"] = {**(meta.get("annotations") or {}), LOCK_ANNOTATION: json.dumps(asdict(self.info))}
        meta.setdefault("labels", {"app.kubernetes.io/managed-by": "fleetplan"})
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.info.id,
                "leaseDurationSeconds": self.duration,
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": transitions,
            },
        }


def _freed(lease: Obj) -> Obj:
    body = dict(lease)
    spec = dict(lease.get("spec") or {})
    spec.pop("holderIdentity", None)
    spec.pop("renewTime", None)
    spec.pop("acquireTime", None)
    meta = dict(lease.get("metadata") or {})
    meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LOCK_ANNOTATION}
    body["spec"], body["metadata"] = spec, meta
    return body
