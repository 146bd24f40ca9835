"""The `Cluster` protocol and `KubeCluster`, its implementation over the Kubernetes REST API.

Invariants:
- Every request goes through `KubeCluster._call`, which counts it (`requests`, per cluster, read
  by tests and benchmarks) and translates failures at this border: transient ones (409 conflict,
  429 with Retry-After, 5xx, dropped connections) become `TransientClusterError`, which apply
  retries; the rest become `ClusterError`. Both name the cluster. No kubernetes exception escapes.
  Two conflicts are final answers, not races: AlreadyExists, and a delete whose uid precondition
  failed (`UidMismatchError`: the name now holds an object fleetplan did not create).
- Objects cross this border as plain dicts (decoded JSON), never client model classes.
- Writes are server-side apply with field manager `fleetplan` and force: the apply body holds only
  fields fleetplan sets, so force only ever reclaims fields fleetplan declares.
- Resource metadata (plural, namespaced) comes from per-group-version discovery, cached; a miss is
  retried once after dropping the cache, because a CRD may have been established meanwhile. The
  built-in GA kinds in `BUILTIN` are known without asking: their plural and scope are fixed by
  the Kubernetes API, and skipping their discovery saves a round trip per group per cluster.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fleetplan.errors import ClusterError
from fleetplan.live.kubeconfigs import ClusterAccess, new_api_client

MANAGER = "fleetplan"
MAX_BACKOFF = 10.0  # seconds; the longest wait between retries when the server gives no Retry-After
_READ_ATTEMPTS = 5
_RETRIED_READ_STATUSES = (429, 500, 502, 503, 504)
# Items as PartialObjectMetadata where the server can (every supported version can), else whole.
_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
Obj = dict[str, Any]


class TransientClusterError(ClusterError):
    """A failure worth retrying: conflict, throttling, server error, dropped connection."""

    def __init__(self, summary: str, *, retry_after: float | None = None, status: int = 0) -> None:
        super().__init__(summary)
        self.retry_after = retry_after
        self.status = status


class NotFoundError(ClusterError):
    """The API server says the object (or its type) does not exist."""


class UidMismatchError(ClusterError):
    """A delete preconditioned on a uid found another object under that name: the one fleetplan
    meant is already gone and someone re-created the name. Retrying cannot change that."""


def retry_delay(
    err: TransientClusterError, attempt: int, *, remaining: float, backoff: float = 0.5
) -> float | None:
    """Seconds to wait before retry number `attempt` (1-based), or None when no time is left.

    The one retry-delay rule for every caller (planning reads here, apply steps in the executor):
    the server's Retry-After when it sent one, else exponential backoff up to `MAX_BACKOFF`; either
    way never past the caller's deadline (`remaining` seconds), so a large Retry-After cannot
    stretch a run beyond its timeout."""
    if remaining <= 0:
        return None
    wanted = err.retry_after if err.retry_after is not None else min(MAX_BACKOFF, backoff * 2 ** (attempt - 1))
    return max(0.0, min(wanted, remaining))


@dataclass(frozen=True)
class ResourceInfo:
    plural: str
    namespaced: bool


def _builtin() -> dict[tuple[str, str], ResourceInfo]:
    table = {
        "v1": ("Namespace:namespaces:c ConfigMap:configmaps Secret:secrets ServiceAccount:serviceaccounts "
               "Service:services Endpoints:endpoints PersistentVolumeClaim:persistentvolumeclaims Pod:pods"),
        "apps/v1": "Deployment:deployments DaemonSet:daemonsets StatefulSet:statefulsets ReplicaSet:replicasets",
        "rbac.authorization.k8s.io/v1": ("Role:roles RoleBinding:rolebindings ClusterRole:clusterroles:c "
                                         "ClusterRoleBinding:clusterrolebindings:c"),
        "apiextensions.k8s.io/v1": "CustomResourceDefinition:customresourcedefinitions:c",
        "admissionregistration.k8s.io/v1": ("ValidatingWebhookConfiguration:validatingwebhookconfigurations:c "
                                            "MutatingWebhookConfiguration:mutatingwebhookconfigurations:c"),
        "certificates.k8s.io/v1": "CertificateSigningRequest:certificatesigningrequests:c",
        "coordination.k8s.io/v1": "Lease:leases",
    }
    out: dict[tuple[str, str], ResourceInfo] = {}
    for api_version, entries in table.items():
        for entry in entries.split():
            kind, plural, *scope = entry.split(":")
            out[(api_version, kind)] = ResourceInfo(plural, namespaced=not scope)
    return out


BUILTIN = _builtin()


class Cluster(Protocol):
    name: str
    requests: int

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None: ...
    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str, *, metadata_only: bool = False
    ) -> list[Obj]: ...
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None: ...
    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj: ...
    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None
    ) -> bool: ...
    def create_subresource(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
    ) -> Obj: ...


class KubeCluster:
    """A `Cluster` over one API server; thread-safe (parallel steps share it)."""

    def __init__(self, access: ClusterAccess, api_client: Any | None = None, timeout: float = 30.0) -> None:
        self.name = access.name
        self.access = access
        self._client = api_client if api_client is not None else new_api_client(access)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._discovery: dict[str, dict[str, ResourceInfo] | None] = {}
        self.requests = 0

    # -- the Cluster protocol ------------------------------------------------------------------

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo | None:
        builtin = BUILTIN.get((api_version, kind))
        if builtin is not None:
            return builtin
        found = self._discovered(api_version)
        info = found.get(kind) if found else None
        if info is None:
            with self._lock:
                self._discovery.pop(api_version, None)
            again = self._discovered(api_version)
            info = again.get(kind) if again else None
        return info

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str, *, metadata_only: bool = False
    ) -> list[Obj]:
        """LIST one kind (in one namespace, or everywhere for ""); `metadata_only` asks the server
        for `PartialObjectMetadata` items (names, labels, uids: what telling objects apart needs),
        which keeps an unfiltered LIST small."""
        info = self.resource_info(api_version, kind)
        if info is None:
            return []
        query = {"labelSelector": label_selector} if label_selector else {}
        status, data = self._call(
            "GET", self._path(api_version, info, namespace), query, accept=_METADATA_LIST if metadata_only else None
        )
        if status == 404:
            return []
        self._raise_for(status, data, f"list {kind}")
        items: list[Obj] = data.get("items") or []
        for item in items:  # list items come without their type
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        info = self.resource_info(api_version, kind)
        if info is None:
            return None
        status, data = self._call("GET", self._path(api_version, info, namespace, name))
        if status == 404:
            return None
        self._raise_for(status, data, f"get {kind} {name}")
        return data

    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        api_version, kind = body["apiVersion"], body["kind"]
        meta = body.get("metadata", {})
        info = self.resource_info(api_version, kind)
        if info is None:
            raise NotFoundError(
                f"cluster {self.name}: the API server does not serve {kind} in {api_version}",
                hint="install its CustomResourceDefinition first",
            )
        query = {"fieldManager": MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        path = self._path(
            api_version, info, meta.get("namespace", "") if info.namespaced else "", meta["name"]
        )
        status, data = self._call(
            "PATCH", path, query, body=json.dumps(body), content_type="application/apply-patch+yaml"
        )
        self._raise_for(status, data, f"{'dry-run ' if dry_run else ''}apply {kind} {meta['name']}")
        return data

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        info = self.resource_info(api_version, kind)
        if info is None:
            return False
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        status, data = self._call(
            "DELETE",
            self._path(api_version, info, namespace, name),
            body=options,
            content_type="application/json",
        )
        if status == 404:
            return False
        if status == 409 and _uid_precondition_failed(data):
            raise UidMismatchError(
                f"cluster {self.name}: {kind} {name} is not the object fleetplan created (uid {uid}): "
                "it was deleted and re-created outside fleetplan; left alone",
                hint="delete it by hand if it should go",
            )
        self._raise_for(status, data, f"delete {kind} {name}")
        return True

    def create_subresource(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
    ) -> Obj:
        info = self.resource_info(api_version, kind)
        if info is None:
            raise NotFoundError(f"cluster {self.name}: {kind} is not served in {api_version}")
        path = self._path(api_version, info, namespace, name) + "/" + subresource
        status, data = self._call("POST", path, body=dict(body), content_type="application/json")
        self._raise_for(status, data, f"create {kind} {name}/{subresource}")
        return data

    def replace_subresource(self, api_version: str, kind: str, namespace: str, name: str,
                            subresource: str, body: Mapping[str, Any]) -> Obj:
        """PUT a subresource (e.g. a CSR's `approval`)."""
        info = self.resource_info(api_version, kind)
        if info is None:
            raise NotFoundError(f"cluster {self.name}: {kind} is not served in {api_version}")
        path = self._path(api_version, info, namespace, name) + "/" + subresource
        status, data = self._call("PUT", path, body=dict(body), content_type="application/json")
        self._raise_for(status, data, f"update {kind} {name}/{subresource}")
        return data

    # -- plumbing ------------------------------------------------------------------------------

    def _discovered(self, api_version: str) -> dict[str, ResourceInfo] | None:
        with self._lock:
            if api_version in self._discovery:
                return self._discovery[api_version]
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        status, data = self._call("GET", path)
        found: dict[str, ResourceInfo] | None = None
        if status != 404:
            self._raise_for(status, data, f"discover {api_version}")
            found = {
                r["kind"]: ResourceInfo(r["name"], bool(r.get("namespaced")))
                for r in data.get("resources", [])
                if "/" not in r["name"]
            }
        with self._lock:
            self._discovery[api_version] = found
        return found

    @staticmethod
    def _path(api_version: str, info: ResourceInfo, namespace: str, name: str = "") -> str:
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if info.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace)}"
        base += f"/{info.plural}"
        return base + (f"/{urllib.parse.quote(name)}" if name else "")

    def _call(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        *,
        body: str | dict[str, Any] | None = None,  # dict: the client JSON-encodes it; str: sent as is
        content_type: str | None = None,
        accept: str | None = None,
    ) -> tuple[int, Obj]:
        attempt = 0
        deadline = time.monotonic() + self._timeout  # retries of one read take no longer than one may
        while True:
            try:
                return self._call_once(method, path, query, body=body, content_type=content_type, accept=accept)
            except TransientClusterError as err:
                # Reads are idempotent and planning has no retry loop of its own (apply retries
                # its steps): retry a throttled or failing GET here. Connection failures are
                # already retried by urllib3 and are not retried again.
                attempt += 1
                if method != "GET" or err.status not in _RETRIED_READ_STATUSES or attempt >= _READ_ATTEMPTS:
                    raise
                delay = retry_delay(err, attempt, remaining=deadline - time.monotonic())
                if delay is None:
                    raise
                time.sleep(delay)

    def _call_once(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        *,
        body: str | dict[str, Any] | None = None,
        content_type: str | None = None,
        accept: str | None = None,
    ) -> tuple[int, Obj]:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept or "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        with self._lock:
            self.requests += 1
        try:
            _, url, headers, _, _ = self._client.param_serialize(
                method,
                path,
                query_params=list((query or {}).items()),
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=self._timeout
            )
            raw = response.read()
        except ApiException as err:  # status 0: TLS failure or the connection dropped
            raise TransientClusterError(
                f"cluster {self.name}: cannot reach the API server: {err.reason or err}"
            ) from err
        except Exception as err:  # urllib3/ssl/socket errors surface as many types
            raise TransientClusterError(
                f"cluster {self.name}: connection failed: {type(err).__name__}: {err}"
            ) from err
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw[:200].decode(errors="replace")}
        # A 409 is a lost race worth retrying, except AlreadyExists and a failed uid precondition
        # (the name now holds another object): both are answers, and retrying cannot change them.
        final_conflict = isinstance(data, dict) and (
            data.get("reason") == "AlreadyExists" or _uid_precondition_failed(data)
        )
        transient = response.status == 429 or response.status >= 500 or response.status == 409
        if transient and not (response.status == 409 and final_conflict):
            retry = response.getheader("Retry-After")
            raise TransientClusterError(
                f"cluster {self.name}: {method} {path}: {response.status} {data.get('message', '')}",
                retry_after=float(retry) if retry and retry.isdigit() else None,
                status=response.status,
            )
        return response.status, data if isinstance(data, dict) else {}

    def _raise_for(self, status: int, data: Obj, what: str) -> None:
        if 200 <= status < 300:
            return
        message = data.get("message") or data.get("reason") or f"HTTP {status}"
        error = NotFoundError if status == 404 else ClusterError
        raise error(
            f"cluster {self.name}: {what}: {message}",
            hint="check the cluster's RBAC for this user" if status in (401, 403) else None,
        )


def _uid_precondition_failed(data: Mapping[str, Any]) -> bool:
    # kube-apiserver answers a delete whose preconditions.uid does not match with 409 Conflict; the
    # message reads "Precondition failed: UID in precondition: X, UID in object meta: Y" in older
    # releases and "the UID in the precondition (X) does not match the UID in record (Y)" in newer.
    message = str(data.get("message", "")).lower()
    return "uid in precondition" in message or "uid in the precondition" in message


def ca_pem(cluster: Cluster) -> str | None:
    """The CA bundle the client trusts for `cluster`, if it is a `KubeCluster` with one."""
    client = getattr(cluster, "_client", None)
    path = getattr(getattr(client, "configuration", None), "ssl_ca_cert", None)
    if not path:
        return None
    with open(path) as handle:
        return handle.read()
