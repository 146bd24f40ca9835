"""How each `Handler` converges, removes and reads a resource, and the registry stacks extend.

A handler is selected by `DesiredResource.handler` (a `Handler` value) and implements
`ResourceHandler`. Object-backed handlers (`apply`, `secret-token`) are planned by the planner's
server-side dry-run diff; the others decide their own action in `assess` from the state record and
the snapshot (e.g. a bound token is re-minted when it nears expiry).

Invariants:
- Secret outputs (`Result.secrets`) live only in memory for one apply; they are never returned
  through `outputs`, which is stored in the state.
- `remove` returns only when the object is gone (finalizers done) or raises on timeout.
- Only writes raise `TransientClusterError` out of a handler (the executor retries those); waits
  ride out transient read failures until their own deadline, so a retry never restarts a wait.
- Stacks register extra handlers (e.g. `accept-cluster`) with `register(name, handler)` at import
  time; the registry is keyed by the handler's string value so plan files stay plain data.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from fleetplan.addrs import Address
from fleetplan.errors import ClusterError, PlanError
from fleetplan.live import readiness as readying
from fleetplan.live.clusters import Cluster, Obj, TransientClusterError, UidMismatchError, ca_pem
from fleetplan.stacks.desired import Handler, Readiness


@dataclass(frozen=True)
class Work:
    """One step for a handler: the resolved body (no Refs left) and everything needed to do it."""

    address: Address
    api_version: str
    body: Mapping[str, Any] | None = field(repr=False)  # may hold resolved secret values
    options: Mapping[str, Any] = field(default_factory=dict)
    readiness: Readiness = field(default_factory=Readiness)
    timeout: float = 300.0
    live_uid: str | None = None


@dataclass(frozen=True)
class Result:
    uid: str | None = None
    outputs: Mapping[str, str] = field(default_factory=dict)  # safe to store and show
    # memory only; state keeps hashes. Kept out of repr: a logged or asserted Result shows no token.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    obj: Mapping[str, Any] | None = field(default=None, repr=False)  # as applied (a Secret's data too)


@dataclass(frozen=True)
class AssessInput:
    address: Address
    options: Mapping[str, Any]
    recorded: bool  # the state has a record for this address
    record_outputs: Mapping[str, str]
    live: Mapping[Address, Obj]  # owned objects read in this plan
    now: float


@dataclass(frozen=True)
class Assessment:
    action: str  # a plan Action value
    reason: str


class ResourceHandler(Protocol):
    object_backed: bool  # planned by dry-run diff of `body` (True) or by `assess` (False)
    outputs_readable: bool  # `read` can produce its outputs without converging again

    def assess(self, item: AssessInput) -> Assessment: ...
    def converge(self, cluster: Cluster, work: Work, progress: readying.Progress) -> Result: ...
    def read(self, cluster: Cluster, work: Work) -> Result: ...
    def remove(self, cluster: Cluster, work: Work, progress: readying.Progress) -> None: ...


class ApplyHandler:
    """Server-side apply of the body, then wait for its readiness."""

    object_backed = True
    outputs_readable = True

    def assess(self, item: AssessInput) -> Assessment:
        raise PlanError(f"{item.address}: apply resources are planned by dry-run, not assessed")

    def converge(self, cluster: Cluster, work: Work, progress: readying.Progress) -> Result:
        assert work.body is not None
        obj = cluster.apply(work.body)
        meta = obj.get("metadata", {})
        readying.wait_ready(
            cluster,
            work.api_version,
            work.address.kind,
            work.address.namespace,
            work.address.name,
            work.readiness,
            timeout=work.timeout,
            progress=progress,
        )
        return Result(uid=meta.get("uid"), obj=obj)

    def read(self, cluster: Cluster, work: Work) -> Result:
        obj = cluster.get(work.api_version, work.address.kind, work.address.namespace, work.address.name)
        if obj is None:
            raise ClusterError(
                f"{work.address} is gone; its outputs cannot be read", address=str(work.address)
            )
        return Result(uid=obj.get("metadata", {}).get("uid"), obj=obj)

    def remove(self, cluster: Cluster, work: Work, progress: readying.Progress) -> None:
        a = work.address
        try:
            deleted = cluster.delete(work.api_version, a.kind, a.namespace, a.name, uid=work.live_uid)
        except UidMismatchError as err:  # ours is gone; the name holds someone else's object now
            progress(f"warning: {err.diagnostics[0].summary}")
            return
        if not deleted:
            return
        deadline = time.monotonic() + work.timeout
        next_report = time.monotonic() + 5
        while True:
            try:
                obj = cluster.get(work.api_version, a.kind, a.namespace, a.name)
            except TransientClusterError:  # the delete was sent; keep waiting to see it done
                obj = {"metadata": {"uid": work.live_uid}} if work.live_uid else {}
            if obj is None or (work.live_uid and obj.get("metadata", {}).get("uid") != work.live_uid):
                return
            now = time.monotonic()
            if now > deadline:
                finalizers = obj.get("metadata", {}).get("finalizers") or []
                raise ClusterError(
                    f"{a} was not gone after {work.timeout:.0f}s"
                    f"{' (finalizers: ' + ', '.join(finalizers) + ')' if finalizers else ''}",
                    address=str(a),
                    hint="look at the controllers that own its finalizers",
                )
            if now >= next_report:
                progress(f"waiting for {a.kind} {a.name} on {a.cluster} to be gone")
                next_report = now + 10
                _nudge_crd_finalizer(cluster, work, obj)
            time.sleep(0.5)


def _nudge_crd_finalizer(cluster: Cluster, work: Work, obj: Obj) -> None:
    """Re-queue a CRD's instance cleanup that kube-apiserver has backed off from.

    The CRD finalizer's first list of instances often fails with "storage is (re)initializing" (the
    CRD's watch cache restarts when deletion begins); it then retries with a per-name exponential
    backoff that grows across deletions of the same CRD name, so a deletion can sit for many
    minutes with nothing left to do. Any update to the CRD re-queues it at once; rewriting the
    Terminating condition's message (which the finalizer itself owns) is that update."""
    replace = getattr(cluster, "replace_subresource", None)
    finalizers = obj.get("metadata", {}).get("finalizers") or []
    if work.address.kind != "CustomResourceDefinition" or replace is None or \
            "customresourcecleanup.apiextensions.k8s.io" not in finalizers:
        return
    body = json.loads(json.dumps(obj))
    for condition in body.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Terminating":
            condition["message"] = f"{condition.get('message', '').split(' (retried')[0]} (retried {time.time():.0f})"
    with contextlib.suppress(ClusterError):  # best effort: the wait goes on either way
        replace(work.api_version, work.address.kind, "", work.address.name, "status", body)


class SecretTokenHandler(ApplyHandler):
    """A `kubernetes.io/service-account-token` Secret; waits until the token controller fills it."""

    def converge(self, cluster: Cluster, work: Work, progress: readying.Progress) -> Result:
        applied = super().converge(cluster, work, progress)
        deadline = time.monotonic() + work.timeout
        while True:
            try:
                result = self.read(cluster, work)
            except TransientClusterError:  # applied already: wait on, do not write again
                result = Result()
            if "token" in result.secrets:
                return Result(uid=applied.uid, outputs=result.outputs, secrets=result.secrets, obj=result.obj)
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{work.address}: the token controller did not fill the Secret within "
                    f"{work.timeout:.0f}s",
                    address=str(work.address),
                    hint="check that kube-controller-manager runs with a service account key",
                )
            progress(f"waiting for the token in Secret {work.address.name} on {work.address.cluster}")
            time.sleep(1.0)

    def read(self, cluster: Cluster, work: Work) -> Result:
        base = super().read(cluster, work)
        data = (base.obj or {}).get("data") or {}
        secrets = {k: base64.b64decode(data[k]).decode() for k in ("token", "ca.crt") if k in data}
        return Result(
            uid=base.uid, outputs={"namespace": work.address.namespace}, secrets=secrets, obj=base.obj
        )


class BoundTokenHandler:
    """A TokenRequest for a ServiceAccount. Options: serviceAccount (default: the address name),
    ttlSeconds (default 86400), rotateBeforeSeconds (default a quarter of the ttl), audiences."""

    object_backed = False
    outputs_readable = False  # a token is never stored, so it can only be minted again

    def assess(self, item: AssessInput) -> Assessment:
        if not item.recorded:
            return Assessment("create", "no token minted yet")
        ttl = float(item.options.get("ttlSeconds", 86400))
        rotate_before = float(item.options.get("rotateBeforeSeconds", ttl / 4))
        expiry = item.record_outputs.get("expiry")
        if not expiry:
            return Assessment("update", "the recorded token has no expiry")
        remaining = datetime.fromisoformat(expiry).timestamp() - item.now
        if remaining <= rotate_before:
            state = "expired" if remaining <= 0 else f"expires at {expiry}, within rotateBefore"
            return Assessment("update", f"token {state}")
        account = Address(
            item.address.cluster,
            "",
            "ServiceAccount",
            item.address.namespace,
            str(item.options.get("serviceAccount", item.address.name)),
        )
        live_account = item.live.get(account)
        recorded_uid = item.record_outputs.get("serviceAccountUid")
        if live_account is not None and recorded_uid and live_account["metadata"].get("uid") != recorded_uid:
            return Assessment("update", "its ServiceAccount was re-created, which revoked the token")
        return Assessment("no-op", f"token valid until {expiry}")

    def converge(self, cluster: Cluster, work: Work, progress: readying.Progress) -> Result:
        account = str(work.options.get("serviceAccount", work.address.name))
        spec: dict[str, Any] = {"expirationSeconds": int(work.options.get("ttlSeconds", 86400))}
        if work.options.get("audiences"):
            spec["audiences"] = list(work.options["audiences"])
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        answer = cluster.create_subresource(
            "v1", "ServiceAccount", work.address.namespace, account, "token", body
        )
        status = answer.get("status") or {}
        expiry = datetime.fromisoformat(status["expirationTimestamp"].replace("Z", "+00:00")).astimezone(UTC)
        sa = cluster.get("v1", "ServiceAccount", work.address.namespace, account) or {}
        root_ca = cluster.get("v1", "ConfigMap", work.address.namespace, "kube-root-ca.crt") or {}
        ca = (root_ca.get("data") or {}).get("ca.crt") or ca_pem(cluster) or ""
        return Result(
            outputs={
                "expiry": expiry.isoformat(timespec="seconds"),
                "serviceAccountUid": sa.get("metadata", {}).get("uid", ""),
            },
            secrets={"token": status["token"], "ca.crt": ca},
        )

    def read(self, cluster: Cluster, work: Work) -> Result:
        raise ClusterError(f"{work.address}: a bound token cannot be read back; it must be minted again")

    def remove(self, cluster: Cluster, work: Work, progress: readying.Progress) -> None:
        """Bound tokens cannot be revoked one by one; they expire, or die with their ServiceAccount."""


class WaitHandler:
    """Nothing to write: wait for readiness of `options.target` (an address) of `options.apiVersion`."""

    object_backed = False
    outputs_readable = True

    def assess(self, item: AssessInput) -> Assessment:
        if not item.recorded:
            return Assessment("read", f"wait for {item.options.get('target', item.address)}")
        return Assessment("no-op", "already awaited")

    def converge(self, cluster: Cluster, work: Work, progress: readying.Progress) -> Result:
        target = Address.parse(str(work.options["target"]))
        obj = readying.wait_ready(
            cluster,
            str(work.options["apiVersion"]),
            target.kind,
            target.namespace,
            target.name,
            work.readiness,
            timeout=work.timeout,
            progress=progress,
        )
        if obj is None:  # readiness NONE: nothing was read while waiting
            obj = cluster.get(str(work.options["apiVersion"]), target.kind, target.namespace, target.name)
        return Result(obj=obj)

    def read(self, cluster: Cluster, work: Work) -> Result:
        return Result()

    def remove(self, cluster: Cluster, work: Work, progress: readying.Progress) -> None:
        """Waiting leaves nothing behind."""


_REGISTRY: dict[str, ResourceHandler] = {
    Handler.APPLY.value: ApplyHandler(),
    Handler.SECRET_TOKEN.value: SecretTokenHandler(),
    Handler.BOUND_TOKEN.value: BoundTokenHandler(),
    Handler.WAIT.value: WaitHandler(),
}


def register(name: str | Handler, handler: ResourceHandler) -> None:
    """Add (or replace) the implementation of a handler; stacks call this at import time."""
    _REGISTRY[name.value if isinstance(name, Handler) else name] = handler


def lookup(name: str | Handler) -> ResourceHandler:
    key = name.value if isinstance(name, Handler) else name
    try:
        return _REGISTRY[key]
    except KeyError:
        raise PlanError(
            f"no implementation registered for handler {key!r}",
            hint="the stack that uses it must be imported so it can register it",
        ) from None
