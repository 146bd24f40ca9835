"""One reconcile of one Fleet resource: the CLI's plan and apply, driven by the resource's spec.

For a live resource: make sure the teardown finalizer is set, write the kubeconfigs its
`kubeconfigSecret`s name to a private temporary directory (removed when the reconcile ends),
validate the spec with the fleet.yaml models, then, holding the fleet's state lock, read the state,
plan, and walk the plan exactly as `fleetplan apply` does, and write status. For a resource being
deleted: plan a destroy (refused while `lifecycle.preventDestroy` protects something, which is
reported in status and retried), walk it, delete the state, and remove the finalizer.

Invariants:
- State lives on the management cluster beside the resource: Secret and Lease
  `fleetplan-state-<name>` (or `spec.state.secretName`) in the resource's namespace, locked for
  every apply, so a second replica (or a CLI run) never applies the same fleet at the same time.
- Kubeconfig contents exist only in memory and in files of mode 0600 inside a 0700 directory; they
  are never logged or written to status.
- A reconcile returns how soon it wants to run again (None: only at the next resync or change).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
from fleetplan.errors import ConfigError, FleetplanError, LockedError, PlanError
from fleetplan.live.objects import ObjectClient
from fleetplan.plan import fleets, planning
from fleetplan.plan.model import Mode, Plan, Step
from fleetplan.plan.stores import kubernetes_store
from fleetplan.state.kubernetes_store import KubernetesStateStore

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
            with tempfile.TemporaryDirectory(prefix="fleetplan-kubeconfigs-") as tmp:
                fleet = fleet_from_resource(obj, base_dir=self.settings.base_dir,
                                            kubeconfigs=self._kubeconfigs(obj, Path(tmp)))
                clusters = list(fleet.cluster_names())
                store = self._store(obj, fleet)
                plan, summary = self._run(obj, fleet, store, Mode.NORMAL)
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

    def _run(self, obj: dict[str, Any], fleet: Fleet, store: KubernetesStateStore,
             mode: Mode) -> tuple[Plan, Any]:
        desired = fleets.desired_for(fleet, self.settings.only)
        label = resource_label(obj)
        with store.locked("controller " + ("destroy" if mode == Mode.DESTROY else "apply")):
            for warning in store.warnings:
                self.log("lock_taken_over", fleet=label, message=warning.summary)
            state = store.read()
            accesses = fleets.accesses_for(fleet)
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
            with tempfile.TemporaryDirectory(prefix="fleetplan-kubeconfigs-") as tmp:
                fleet = fleet_from_resource(obj, base_dir=self.settings.base_dir,
                                            kubeconfigs=self._kubeconfigs(obj, Path(tmp)))
                store = self._store(obj, fleet)
                plan, summary = self._run(obj, fleet, store, Mode.DESTROY)
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

    def _kubeconfigs(self, obj: Mapping[str, Any], directory: Path) -> dict[str, Path]:
        namespace = obj["metadata"]["namespace"]
        os.chmod(directory, 0o700)
        paths: dict[str, Path] = {}
        for cluster, (secret_name, key) in secret_refs(obj).items():
            secret = self.api.get("v1", "Secret", namespace, secret_name)
            data = (secret or {}).get("data") or {}
            if key not in data:
                what = f"has no key {key!r}" if secret else "does not exist"
                raise ConfigError(f"cluster {cluster}: kubeconfig Secret {namespace}/{secret_name} {what}",
                                  hint="create it with kubectl create secret generic NAME "
                                  f"--from-file={key}=PATH in the Fleet's namespace")
            import base64

            path = directory / f"{cluster}.kubeconfig"
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(base64.b64decode(data[key]))
            paths[cluster] = path
        return paths

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


def _cluster_names(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    names = [str((spec.get("leader") or {}).get("name") or "")]
    names += [str(m.get("name")) for m in spec.get("members") or [] if isinstance(m, dict)]
    return [n for n in names if n]
