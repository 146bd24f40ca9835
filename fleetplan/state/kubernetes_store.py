"""The `kubernetes` state backend: state in a Secret, the lock in a Lease, for many machines at once.

Layout (namespace N, name S, both from `spec.state`):
- Secret `N/S` holds the gzip-compressed state JSON under `state.json.gz`, or, when that is larger
  than `part_size`, nothing but the annotation `fleetplan.dev/state-parts`: the names of Secrets
  `S-<serial>-<i>` that hold the pieces in order. Annotations also carry the serial, the lineage
  and the SHA-256 of the whole compressed document, which a reader checks.
- Lease `N/S` is the lock (`fleetplan.state.leasing`): holder, duration, renewal, expiry.

Invariants:
- The Secret `N/S` is the commit point. Parts of a new version are written first under names no
  earlier version used (they include the serial); then `N/S` is replaced carrying the
  resourceVersion last read, so a writer that lost a race (or whose lock was forced away) gets a
  `StateError` and never overwrites newer state; only then are the old parts deleted. A kill at any
  instant leaves the previous or the new state readable, plus at most some orphaned parts, which
  the next write removes (it lists the parts by label).
- `persist` refuses to write once the lock this store took is lost (not renewed within its
  duration, or taken over), so a paused holder cannot clobber its successor's state.
- Serials only grow, exactly as with the local store.
- The cluster is reached only through the `Objects` protocol (`fleetplan.live.objects`).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fleetplan.errors import Diagnostic, LockedError, StateError
from fleetplan.state import model
from fleetplan.state.leasing import LeaseLock, Objects
from fleetplan.state.storing import LockInfo, _user

PART_SIZE = 512 * 1024  # compressed bytes per Secret; Secrets are limited to 1 MiB of data
DATA_KEY = "state.json.gz"
PART_KEY = "part"
A_SERIAL = "fleetplan.dev/state-serial"
A_LINEAGE = "fleetplan.dev/state-lineage"
A_SHA = "fleetplan.dev/state-sha256"
A_PARTS = "fleetplan.dev/state-parts"
PART_LABEL = "fleetplan.dev/state-of"


class KubernetesStateStore:
    """A `StateStore` kept in one cluster's Secrets and Lease."""

    def __init__(self, api: Objects, namespace: str, name: str, *, lease_duration: int = 30,
                 part_size: int = PART_SIZE, where: str = "") -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.lease_duration = lease_duration
        self.part_size = part_size
        self.where = where or f"Secret {namespace}/{name}"
        self.warnings: list[Diagnostic] = []
        self._serial: int | None = None
        self._secret: dict[str, Any] | None = None  # as last read or written
        self._lock: LeaseLock | None = None
        self._swept = False  # orphaned parts looked for since this store was made

    def __str__(self) -> str:
        return self.where

    # -- reading and writing -------------------------------------------------------------------

    def read(self) -> model.State | None:
        secret = self.api.get("v1", "Secret", self.namespace, self.name)
        self._secret = secret
        if secret is None:
            self._serial = 0
            return None
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        data = secret.get("data") or {}
        parts = json.loads(annotations.get(A_PARTS) or "[]")
        if parts:
            chunks = []
            for part in parts:
                piece = self.api.get("v1", "Secret", self.namespace, part)
                if piece is None or PART_KEY not in (piece.get("data") or {}):
                    raise StateError(f"state {self.where} is damaged: its part {part} is missing",
                                     hint="restore the Secrets from a backup of the namespace")
                chunks.append(base64.b64decode(piece["data"][PART_KEY]))
            payload = b"".join(chunks)
        elif DATA_KEY in data:
            payload = base64.b64decode(data[DATA_KEY])
        else:
            raise StateError(f"{self.where} holds no fleetplan state (no {DATA_KEY})",
                             hint="point spec.state.secretName at a Secret fleetplan wrote, or delete it")
        digest = hashlib.sha256(payload).hexdigest()
        if annotations.get(A_SHA) and annotations[A_SHA] != digest:
            raise StateError(f"state {self.where} is damaged: its checksum does not match",
                             hint="restore the Secrets from a backup of the namespace")
        try:
            doc = json.loads(gzip.decompress(payload))
        except (OSError, ValueError) as err:
            raise StateError(f"state {self.where} is damaged: {err}") from err
        state = model.from_dict(doc, source=self.where)
        self._serial = state.serial
        return state

    def persist(self, state: model.State) -> model.State:
        if self._lock is not None and not self._lock.still_held():
            raise LockedError(f"lost the lock on {self.where} (not renewed within "
                              f"{self.lease_duration}s, or taken over); the state was not written",
                              hint="check what else runs against this state, then plan again")
        if self._serial is None:
            self.read()
        written = replace(state, serial=max(self._serial or 0, state.serial) + 1)
        payload = gzip.compress(model.dumps(written).encode(), mtime=0)
        old_parts = self._parts(self._secret)
        if len(payload) <= self.part_size:
            data, parts = {DATA_KEY: base64.b64encode(payload).decode()}, []
        else:
            data, parts = {}, self._write_parts(payload, written.serial)
        body = self._main_body(written, payload, data, parts)
        saved = self.api.create(body) if self._secret is None else self.api.replace(body)
        if saved is None:
            raise StateError(f"state {self.where} was changed by another writer meanwhile; nothing was "
                             "overwritten", hint="another run holds (or forced) the lock; plan again")
        self._secret, self._serial = saved, written.serial
        stale = set(old_parts) - set(parts)
        if parts or old_parts or not self._swept:
            # also parts a killed writer left unreferenced (listed once per run, or when parts are in use)
            found, _ = self.api.list("v1", "Secret", self.namespace, f"{PART_LABEL}={self.name}")
            stale |= {o["metadata"]["name"] for o in found} - set(parts)
            self._swept = True
        for name in sorted(stale):
            self.api.delete("v1", "Secret", self.namespace, name)
        return written

    def _parts(self, secret: dict[str, Any] | None) -> list[str]:
        annotations = ((secret or {}).get("metadata") or {}).get("annotations") or {}
        return list(json.loads(annotations.get(A_PARTS) or "[]"))

    def _write_parts(self, payload: bytes, serial: int) -> list[str]:
        names = []
        for index, start in enumerate(range(0, len(payload), self.part_size)):
            name = f"{self.name}-{serial}-{index}"
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": name, "namespace": self.namespace,
                                 "labels": {PART_LABEL: self.name, "app.kubernetes.io/managed-by": "fleetplan"}},
                    "data": {PART_KEY: base64.b64encode(payload[start:start + self.part_size]).decode()}}
            if self.api.create(body) is None:  # an orphan of a killed writer with the same serial
                current = self.api.get("v1", "Secret", self.namespace, name)
                if current is None or self.api.replace({**body, "metadata": current["metadata"]}) is None:
                    raise StateError(f"cannot write state part {name}: it is being changed concurrently")
            names.append(name)
        return names

    def _main_body(self, state: model.State, payload: bytes, data: dict[str, str],
                   parts: list[str]) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/managed-by": "fleetplan", "fleetplan.dev/fleet": state.fleet},
            "annotations": {A_SERIAL: str(state.serial), A_LINEAGE: state.lineage,
                            A_SHA: hashlib.sha256(payload).hexdigest(), A_PARTS: json.dumps(parts)},
        }
        if self._secret is not None:
            meta["resourceVersion"] = (self._secret.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta, "data": data}

    def remove(self) -> None:
        """Delete the state and its parts and the Lease (after a teardown that left nothing behind)."""
        current = self.api.get("v1", "Secret", self.namespace, self.name)
        for part in self._parts(current):
            self.api.delete("v1", "Secret", self.namespace, part)
        self.api.delete("v1", "Secret", self.namespace, self.name)
        self.api.delete("coordination.k8s.io/v1", "Lease", self.namespace, self.name)

    # -- locking -------------------------------------------------------------------------------

    def lock(self, operation: str) -> LockInfo:
        host = socket.gethostname()
        info = LockInfo(id=str(uuid.uuid4()), holder=f"{_user()}@{host}", host=host, pid=os.getpid(),
                        created=datetime.now(UTC).isoformat(timespec="seconds"), operation=operation)
        lease = LeaseLock(self.api, self.namespace, self.name, self.lease_duration, info)
        taken, other = lease.try_acquire()
        if not taken:
            who = other.describe() if other else "another holder"
            raise LockedError(f"state {self.where} is locked by {who}",
                              hint="wait for that run to finish (the lock expires "
                              f"{self.lease_duration}s after its holder stops renewing it), or run "
                              f"`fleetplan force-unlock {other.id if other else 'ID'}` if it is gone")
        if other is not None:
            self.warnings.append(Diagnostic(f"took over the expired lock of {other.describe()}: it was not "
                                            f"renewed for {self.lease_duration}s", severity="warning"))
        lease.start_renewing()
        self._lock = lease
        return info

    def lock_info(self) -> LockInfo | None:
        holder, expired = LeaseLock(self.api, self.namespace, self.name, self.lease_duration,
                                    _nobody()).current()
        return None if expired else holder

    def unlock(self, lock_id: str) -> None:
        if self._lock is not None and self._lock.info.id == lock_id:
            self._lock.release()
            self._lock = None

    def force_unlock(self, lock_id: str) -> LockInfo:
        probe = LeaseLock(self.api, self.namespace, self.name, self.lease_duration, _nobody())
        holder, _ = probe.current()
        if holder is None:
            raise StateError(f"state {self.where} is not locked")
        if holder.id != lock_id:
            raise StateError(f"lock ID {lock_id} does not match the lock held by {holder.describe()}",
                             hint=f"run `fleetplan force-unlock {holder.id}` if that run is really gone")
        released = probe.force_release(lock_id)
        if released is None:
            raise StateError(f"the lock on {self.where} changed while releasing it; look again")
        return released

    @contextlib.contextmanager
    def locked(self, operation: str) -> Iterator[LockInfo]:
        info = self.lock(operation)
        try:
            yield info
        finally:
            self.unlock(info.id)


def _nobody() -> LockInfo:
    return LockInfo(id="", holder="", host="", pid=0, created="", operation="inspect")
