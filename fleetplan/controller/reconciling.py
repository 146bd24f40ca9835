"""One reconcile of one Fleet resource: the CLI's plan and apply, driven by the resource's spec.

For a live resource: make sure the teardown finalizer is set, read the kubeconfigs its
`kubeconfigSecret`s name, validate the spec with the fleet.yaml models, then, holding the fleet's
state lock, read the state, plan, and walk the plan exactly as `fleetplan apply` does, and write
status. For a resource being
deleted: plan a destroy (refused while `lifecycle.preventDestroy` protects something, which is
reported in status and retried), walk it, delete the state, and remove the finalizer.

Invariants:
- State lives on the management cluster beside the resource: Secret and Lease
  `fleetplan-state-<name>` (or `spec.state.secretName`) in the resource's namespace, locked for
  every apply, so a second replica (or a CLI run) never applies the same fleet at the same time.
- Clients are built from the kubeconfigs in memory; the state records each cluster's Secret
  reference (namespace, name, key), never a path. A member removed from the spec but holding
  recorded objects is reached through its Secret, which still exists; if it does not, the
  reconcile fails with a condition naming that Secret. (Validation and the stacks read the leader's
  and members' kubeconfigs as files: those copies live, 0600, in a directory inside the process's
  private 0700 directory, removed when the reconcile ends and swept after a crash.)
- Kubeconfig contents are never logged or written to status.
- A reconcile returns how soon it wants to run again (None: only at the next resync or change).
"""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fleetplan.apply.executing import ClusterExecutor
from fleetplan.apply.hooks import Hook, Hooks, Outcome
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import DEFAULT_PARALLELISM, walk_plan
from fleetplan.config.crd import GROUP, VERSION
from fleetplan.config.models import Fleet
from fleetplan.config.resources import fleet_from_resource, resource_label, secret_refs
from fleetplan.controller import statuses
from fleetplan.errors import ClusterError, ConfigError, Diagnostic, FleetplanError, LockedError, PlanError
from fleetplan.live import keyfiles
from fleetplan.live.kubeconfigs import ClusterAccess, SecretRef, access_from_kubeconfig
from fleetplan.live.objects import ObjectClient
from fleetplan.plan import fleets, planning
from fleetplan.plan.model import Mode, Plan, Step
from fleetplan.plan.stores import kubernetes_store
from fleetplan.state.kubernetes_store import KubernetesStateStore
from fleetplan.state.model import State

FLEET_API = f"{GROUP}/{VERSION}"
FINALIZER = "fleetplan.dev/teardown"
Log = Callable[..., None]


@dataclass(frozen=True)
class Settings:
    base_dir: Path  # relative manifest paths in specs resolve here
    only: tuple[str, ...] = ()  # stacks to render (the engine's --only); empty: the spec's stack
    parallelism: int = DEFAULT_PARALLELISM
    retry_after: float = 5.0  # requeue delay after a failure or a held lock


class StepLog(Hook):
    """Apply progress as log events (addresses and actions only, never bodies)."""

    def __init__(self, log: Log, fleet: str) -> None:
        self.log, self.fleet = log, fleet

    def step_starting(self, step: Step) -> None:
        if step.action.has_side_effects:
            self.log("step_start", fleet=self.fleet, address=str(step.address), action=step.action.value)

    def step_finished(self, outcome: Outcome) -> None:
        if outcome.step.action.has_side_effects:
            self.log("step_" + ("complete" if outcome.status.value == "ok" else outcome.status.value),
                     fleet=self.fleet, address=str(outcome.step.address), action=outcome.step.action.value,
                     error=outcome.error.summary if outcome.error else None)


class Reconciler:
    def __init__(self, api: ObjectClient, settings: Settings, log: Log,
                 still_leading: Callable[[], bool] = lambda: True) -> None:
        self.api = api
        self.settings = settings
        self.log = log
        self.still_leading = still_leading

    def reconcile(self, namespace: str, name: str) -> float | None:
        obj = self.api.get(FLEET_API, "Fleet", namespace, name)
        if obj is None:
            return None
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if obj["metadata"].get("deletionTimestamp"):
            return self._teardown(obj) if FINALIZER in finalizers else None
        if FINALIZER not in finalizers:
            patch = {"metadata": {"finalizers": [*finalizers, FINALIZER],
                                  "resourceVersion": obj["metadata"]["resourceVersion"]}}
            obj = self.api.merge_patch(FLEET_API, "Fleet", namespace, name, patch) or {}
            if not obj:
                return 0.0  # changed meanwhile: look again
        return self._converge(obj)

    # -- converging ----------------------------------------------------------------------------

    def _converge(self, obj: dict[str, Any]) -> float | None:
        meta = obj["metadata"]
        label, generation = resource_label(obj), int(meta.get("generation") or 0)
        clusters = _cluster_names(obj)
        try:
            with self._fleet(obj) as (fleet, accesses):
                clusters = list(fleet.cluster_names())
                store = self._store(obj, fleet)
                plan, summary = self._run(obj, fleet, accesses, store, Mode.NORMAL)
        except LockedError as err:
            self.log("locked", fleet=label, message=err.diagnostics[0].summary)
            return self.settings.retry_after
        except FleetplanError as err:
            reason = "InvalidSpec" if isinstance(err, ConfigError) else "PlanFailed"
            self.log("reconcile_failed", fleet=label, reason=reason, message=str(err))
            self._status(obj, statuses.failed(clusters, reason, err.diagnostics), generation)
            return self.settings.retry_after if reason != "InvalidSpec" else None
        conditions = statuses.applied(clusters, plan, summary)
        self._status(obj, conditions, generation, last_plan=statuses.plan_summary(plan, summary),
                     clusters=clusters)
        self.log("reconciled", fleet=label, generation=generation, ready=not summary.failures,
                 summary=statuses.plan_summary(plan, summary)["summary"])
        return self.settings.retry_after if summary.failures else None

    def _run(self, obj: dict[str, Any], fleet: Fleet, accesses: dict[str, ClusterAccess],
             store: KubernetesStateStore, mode: Mode) -> tuple[Plan, Any]:
        desired = fleets.desired_for(fleet, self.settings.only)
        label = resource_label(obj)
        with store.locked("controller " + ("destroy" if mode == Mode.DESTROY else "apply")):
            for warning in store.warnings:
                self.log("lock_taken_over", fleet=label, message=warning.summary)
            state = store.read()
            accesses = {**accesses, **self._retired(obj, state, accesses)}
            clusters = fleets.connect(accesses)
            options = planning.Options(mode=mode, wait_timeout=fleet.spec.wait.timeout_seconds)
            plan = planning.plan_fleet(desired, clusters, state, options, accesses)
            if plan.has_changes:
                if not self.still_leading():
                    raise LockedError(f"{label}: no longer the leader; not applying")
                self.log("applying", fleet=label, summary=statuses.plan_summary(plan, None)["summary"])
                if mode == Mode.NORMAL:
                    # observedGeneration moves only when a reconcile finishes: until then the
                    # other conditions still describe the generation they were written for
                    status = obj.get("status") or {}
                    self._status(obj, statuses.progressing(list(fleet.cluster_names()), plan,
                                                           status.get("conditions") or []),
                                 int(status.get("observedGeneration") or 0))
            executor = ClusterExecutor(plan, clusters, default_timeout=float(fleet.spec.wait.timeout_seconds))
            hooks = Hooks([StateRecorder(store, state, plan.fleet), StepLog(self.log, label)])
            summary = walk_plan(plan, executor, hooks, parallelism=self.settings.parallelism)
        return plan, summary

    # -- tearing down --------------------------------------------------------------------------

    def _teardown(self, obj: dict[str, Any]) -> float | None:
        meta = obj["metadata"]
        label, generation = resource_label(obj), int(meta.get("generation") or 0)
        clusters = _cluster_names(obj)
        try:
            with self._fleet(obj) as (fleet, accesses):
                store = self._store(obj, fleet)
                plan, summary = self._run(obj, fleet, accesses, store, Mode.DESTROY)
        except LockedError as err:
            self.log("locked", fleet=label, message=err.diagnostics[0].summary)
            return self.settings.retry_after
        except FleetplanError as err:
            reason = "DestroyPrevented" if isinstance(err, PlanError) and "preventDestroy" in str(err) \
                else "TeardownFailed"
            self.log("teardown_blocked", fleet=label, reason=reason, message=str(err))
            self._status(obj, statuses.failed(clusters, reason, err.diagnostics), generation)
            return self.settings.retry_after
        if summary.failures:
            self._status(obj, statuses.applied(clusters, plan, summary), generation,
                         last_plan=statuses.plan_summary(plan, summary))
            return self.settings.retry_after
        store.remove()
        rest = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        done = self.api.merge_patch(FLEET_API, "Fleet", meta["namespace"], meta["name"],
                                    {"metadata": {"finalizers": rest, "resourceVersion": meta["resourceVersion"]}})
        self.log("torn_down", fleet=label, summary=statuses.plan_summary(plan, summary)["summary"])
        return None if done is not None else 0.0

    # -- plumbing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _fleet(self, obj: Mapping[str, Any]) -> Iterator[tuple[Fleet, dict[str, ClusterAccess]]]:
        """The validated fleet and how to reach each of its clusters (Secret kubeconfigs in memory)."""
        namespace = obj["metadata"]["namespace"]
        raw = {cluster: self._secret_kubeconfig(SecretRef(namespace, name, key), cluster)
               for cluster, (name, key) in secret_refs(obj).items()}
        # file copies only for validation and the stacks, which read kubeconfigs from paths
        with tempfile.TemporaryDirectory(prefix="reconcile-", dir=keyfiles.private_dir()) as tmp:
            paths = {cluster: _write_private(Path(tmp) / f"{cluster}.kubeconfig", text)
                     for cluster, (_, text) in raw.items()}
            fleet = fleet_from_resource(obj, base_dir=self.settings.base_dir, kubeconfigs=paths)
            accesses = fleets.accesses_for(fleet)
            for cluster, (ref, text) in raw.items():
                if cluster in accesses:
                    bare = replace(accesses[cluster], kubeconfig=None, kubeconfig_secret=ref)
                    accesses[cluster] = access_from_kubeconfig(bare, text)
            yield fleet, accesses

    def _secret_kubeconfig(self, ref: SecretRef, cluster: str,
                           error: type[FleetplanError] = ConfigError) -> tuple[SecretRef, bytes]:
        secret = self.api.get("v1", "Secret", ref.namespace, ref.name)
        data = (secret or {}).get("data") or {}
        if ref.key not in data:
            what = f"has no key {ref.key!r}" if secret else "does not exist"
            raise error(f"cluster {cluster}: kubeconfig Secret {ref.namespace}/{ref.name} {what}",
                        hint="create it with kubectl create secret generic NAME "
                        f"--from-file={ref.key}=PATH in the Fleet's namespace")
        return ref, base64.b64decode(data[ref.key])

    def _retired(self, obj: Mapping[str, Any], state: State | None,
                 current: Mapping[str, ClusterAccess]) -> dict[str, ClusterAccess]:
        """Clusters that left the spec but still hold recorded objects, reached through the
        kubeconfig Secret the state recorded for them (it outlives the spec entry)."""
        if state is None:
            return {}
        held = {a.cluster for a in state.resources} | {e.address.cluster for e in state.journal}
        found: dict[str, ClusterAccess] = {}
        problems: list[Diagnostic] = []
        for name in sorted(held - set(current)):
            if name not in state.clusters:
                continue
            access = ClusterAccess.from_dict(state.clusters[name])
            ref = access.kubeconfig_secret
            if ref is None:
                continue  # a path recorded by the CLI: planning reaches it (or says why not)
            if ref.namespace != obj["metadata"]["namespace"]:
                problems.append(Diagnostic(f"cluster {name}: the state names kubeconfig {ref.describe()} "
                                           "outside the Fleet's namespace; not reading it", address=name))
                continue
            try:
                _, text = self._secret_kubeconfig(ref, name, ClusterError)
                found[name] = access_from_kubeconfig(access, text)
            except ClusterError as err:
                problems.append(Diagnostic(
                    f"cluster {name} left the fleet but the state still holds objects fleetplan created "
                    f"there, and it cannot be reached to delete them: {err.diagnostics[0].summary}",
                    address=name,
                    hint=f"recreate {ref.describe()} so the objects are deleted, or forget them with "
                    "`fleetplan state rm` and clean the cluster up by hand"))
        if problems:
            raise ClusterError(problems)
        return found

    def _store(self, obj: Mapping[str, Any], fleet: Fleet) -> KubernetesStateStore:
        name = fleet.spec.state.secret_name or f"fleetplan-state-{fleet.name}"
        return kubernetes_store(self.api, obj["metadata"]["namespace"], name,
                                fleet.spec.state.lease_duration_seconds, where="management cluster Secret",
                                check_namespace=False)  # the Fleet's own namespace exists

    def _status(self, obj: Mapping[str, Any], conditions: list[statuses.Condition], generation: int, *,
                last_plan: dict[str, Any] | None = None, clusters: list[str] | None = None) -> None:
        meta = obj["metadata"]
        previous = (obj.get("status") or {}).get("conditions") or []
        status: dict[str, Any] = {"observedGeneration": generation,
                                  "conditions": statuses.merge_conditions(previous, conditions, generation)}
        if last_plan is not None:
            status["lastPlan"] = last_plan
        if clusters is not None:
            status["clusters"] = clusters
        self.api.merge_patch(FLEET_API, "Fleet", meta["namespace"], meta["name"], {"status": status},
                             subresource="status")
        if isinstance(obj, dict):  # later writes in this reconcile merge with what was just written
            obj.setdefault("status", {}).update(status)


def _write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _cluster_names(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    names = [str((spec.get("leader") or {}).get("name") or "")]
    names += [str(m.get("name")) for m in spec.get("members") or [] if isinstance(m, dict)]
    return [n for n in names if n]
