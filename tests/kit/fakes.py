"""A small in-memory `Cluster` for unit tests of pure planning and walking logic (never a stand-in
for the API server in tests of cluster behaviour: those run on the lab).

`MemoryCluster` keeps objects by name (one namespace, built-in kinds), answers LIST with all of them
and GET by name, stores what it is applied with a uid `uid-<name>`, and deletes by name. Tests
subclass it to count, slow down or fail requests.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fleetplan.live.clusters import BUILTIN, Obj, ResourceInfo


class MemoryCluster:
    def __init__(self, name: str = "good") -> None:
        self.name, self.requests = name, 0
        self.objects: dict[str, Obj] = {}

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None:
        return BUILTIN.get((api_version, kind))

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str, *,
             metadata_only: bool = False) -> list[Obj]:
        return [copy.deepcopy(o) for o in self.objects.values()]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get(name))

    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        name = body["metadata"]["name"]
        obj = {**copy.deepcopy(dict(body)), "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
        if not dry_run:
            self.objects[name] = obj
        return obj

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        return self.objects.pop(name, None) is not None
