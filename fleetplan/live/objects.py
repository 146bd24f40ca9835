"""Whole-object reads and writes with optimistic concurrency, and watches: what the state backend
and the controller need beyond the engine's server-side apply.

`ObjectClient` wraps a `KubeCluster` (so requests are counted and errors translated at the same
border) and adds create, replace (PUT with the read `resourceVersion`), JSON merge patches (on the
object or its `status`), list with the collection's resourceVersion, and a streaming watch.

Invariants:
- Conflicts are values, not errors: `create` returns None when the object already exists and
  `replace`/`merge_patch` return None when the resourceVersion they carried is stale, because for
  the callers (locks, leader election, state writes) losing a race is an expected outcome.
- Every other failure is a `ClusterError` naming the cluster; no kubernetes exception escapes.
- Objects cross the border as plain dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from fleetplan.errors import ClusterError
from fleetplan.live.clusters import KubeCluster, NotFoundError, Obj, ResourceInfo, TransientClusterError
from fleetplan.live.kubeconfigs import ClusterAccess

WatchEvent = tuple[str, Obj]  # (ADDED | MODIFIED | DELETED | BOOKMARK, object)


class GoneError(ClusterError):
    """A watch's resourceVersion is too old (HTTP 410): list again and watch from there."""


class ObjectClient:
    """Typed-enough access to whole objects on one cluster; thread-safe like `KubeCluster`."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.name = cluster.name

    @classmethod
    def connect(cls, access: ClusterAccess | None) -> ObjectClient:
        """A client from a kubeconfig, or (None) from the pod's service account in a cluster."""
        if access is not None:
            return cls(KubeCluster(access))
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        conf = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
        except ConfigException as err:
            raise ClusterError(f"not running in a cluster: {err}",
                               hint="pass --kubeconfig to reach the management cluster") from err
        return cls(KubeCluster(ClusterAccess("management"), api_client=client.ApiClient(conf)))

    def _info(self, api_version: str, kind: str) -> ResourceInfo:
        info = self.cluster.resource_info(api_version, kind)
        if info is None:
            raise NotFoundError(
                f"cluster {self.name}: the API server does not serve {kind} in {api_version}",
                hint="install its CustomResourceDefinition first",
            )
        return info

    def _path(self, api_version: str, kind: str, namespace: str, name: str = "") -> str:
        info = self._info(api_version, kind)
        return self.cluster._path(api_version, info, namespace if info.namespaced else "", name)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        return self.cluster.get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str = "", label_selector: str = "") -> tuple[list[Obj], str]:
        """The items and the collection's resourceVersion (to watch from)."""
        query = {"labelSelector": label_selector} if label_selector else {}
        status, data = self.cluster._call("GET", self._path(api_version, kind, namespace), query)
        self.cluster._raise_for(status, data, f"list {kind}")
        items: list[Obj] = data.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, str(data.get("metadata", {}).get("resourceVersion", ""))

    def create(self, body: Mapping[str, Any]) -> Obj | None:
        """POST `body`; None when an object of that name already exists."""
        meta = body.get("metadata", {})
        path = self._path(body["apiVersion"], body["kind"], meta.get("namespace", ""))
        status, data = self.cluster._call("POST", path, body=dict(body), content_type="application/json")
        if status == 409:
            return None
        self.cluster._raise_for(status, data, f"create {body['kind']} {meta.get('name')}")
        return data

    def replace(self, body: Mapping[str, Any]) -> Obj | None:
        """PUT `body`, which carries the resourceVersion it was read at; None on a conflict."""
        meta = body.get("metadata", {})
        path = self._path(body["apiVersion"], body["kind"], meta.get("namespace", ""), meta["name"])
        return self._write("PUT", path, dict(body), "application/json", f"update {body['kind']} {meta['name']}")

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str = "",
    ) -> Obj | None:
        """A JSON merge patch (a resourceVersion in `patch.metadata` makes it conditional)."""
        path = self._path(api_version, kind, namespace, name) + (f"/{subresource}" if subresource else "")
        return self._write(
            "PATCH", path, dict(patch), "application/merge-patch+json", f"patch {kind} {name}"
        )

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        return self.cluster.delete(api_version, kind, namespace, name, uid)

    def _write(self, method: str, path: str, body: Any, content_type: str, what: str) -> Obj | None:
        try:
            status, data = self.cluster._call(method, path, body=body, content_type=content_type)
        except TransientClusterError as err:
            if err.status == 409:  # stale resourceVersion: someone else wrote first
                return None
            raise
        self.cluster._raise_for(status, data, what)
        return data

    def watch(
        self, api_version: str, kind: str, namespace: str, resource_version: str, timeout_seconds: int = 30
    ) -> Iterator[WatchEvent]:
        """Events after `resource_version` until the server closes the watch (`timeout_seconds`).

        Raises `GoneError` when that version was compacted away; the caller lists again.
        """
        from kubernetes.client.exceptions import ApiException

        client = self.cluster._client
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        path = self._path(api_version, kind, namespace)
        try:
            _, url, headers, _, _ = client.param_serialize(
                "GET", path, query_params=query, header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = client.call_api("GET", url, header_params=headers,
                                       _request_timeout=(10, timeout_seconds + 15))
        except (ApiException, OSError) as err:
            raise TransientClusterError(f"cluster {self.name}: cannot watch {kind}: {err}") from err
        except Exception as err:  # urllib3 errors come in many types
            raise TransientClusterError(f"cluster {self.name}: cannot watch {kind}: {type(err).__name__}") from err
        if response.status != 200:
            data = json.loads(response.read() or b"{}")
            if response.status == 410:
                raise GoneError(f"cluster {self.name}: watch of {kind} expired")
            self.cluster._raise_for(response.status, data, f"watch {kind}")
        yield from _events(response.response, self.name, kind)


def _events(raw: Any, cluster: str, kind: str) -> Iterator[WatchEvent]:
    buffer = b""
    try:
        for chunk in raw.stream(4096, decode_content=True):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError(f"cluster {cluster}: watch of {kind} expired")
                    raise TransientClusterError(f"cluster {cluster}: watch of {kind}: {obj.get('message')}")
                yield str(event.get("type")), obj
    except (GoneError, TransientClusterError):
        raise
    except Exception as err:  # a dropped stream ends the watch; the caller re-lists
        raise TransientClusterError(f"cluster {cluster}: watch of {kind} broke: {type(err).__name__}") from err
    finally:
        raw.release_conn()
