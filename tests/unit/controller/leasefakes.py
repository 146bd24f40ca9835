"""A small in-memory stand-in for `fleetplan.live.objects.ObjectClient` (the `Objects` protocol):
objects keyed by kind/namespace/name, resourceVersions that grow, and conflicts on stale writes,
which is all the lock and state logic relies on. The real API server is exercised by the
integration tests; this fake only lets the pure logic be tested quickly and exhaustively.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


class FakeObjects:
    def __init__(self) -> None:
        self.store: dict[tuple[str, str, str], Obj] = {}
        self.version = 0
        self.writes = 0

    def _key(self, kind: str, namespace: str, name: str) -> tuple[str, str, str]:
        return (kind, namespace, name)

    def _stamp(self, body: Mapping[str, Any]) -> Obj:
        self.version += 1
        self.writes += 1
        obj = copy.deepcopy(dict(body))
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        found = self.store.get(self._key(kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(self, api_version: str, kind: str, namespace: str = "", label_selector: str = "") -> tuple[list[Obj], str]:
        key, _, value = label_selector.partition("=")
        items = [copy.deepcopy(o) for (k, ns, _), o in self.store.items()
                 if k == kind and ns == namespace
                 and (not key or (o["metadata"].get("labels") or {}).get(key) == value)]
        return items, str(self.version)

    def create(self, body: Mapping[str, Any]) -> Obj | None:
        meta = body["metadata"]
        key = self._key(body["kind"], meta.get("namespace", ""), meta["name"])
        if key in self.store:
            return None
        self.store[key] = self._stamp(body)
        return copy.deepcopy(self.store[key])

    def replace(self, body: Mapping[str, Any]) -> Obj | None:
        meta = body["metadata"]
        key = self._key(body["kind"], meta.get("namespace", ""), meta["name"])
        current = self.store.get(key)
        if current is None or meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return None
        self.store[key] = self._stamp(body)
        return copy.deepcopy(self.store[key])

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        return self.store.pop(self._key(kind, namespace, name), None) is not None
