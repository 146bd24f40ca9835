"""Helpers for the reliability suite: a fleet in a temp dir driven through the real CLI, the
end-state checks every crash and fault test shares, and the results the report is made from.

`ResourcesFleet` is the shared kit's fleet (`kit.fleets`) on the lab's 3 clusters (c1 leader, c2
and c3 members): a namespace, ConfigMap, ServiceAccount, Deployment, Role and RoleBinding on each,
18 objects in all, each carrying the fleet's ownership label. Here its fleet file names the Antrea
stack and every engine command is narrowed to the `resources` stack (`with_only`), and the 6
objects of a cluster are one file, `extras/app.yaml`. Each fleet has a unique name, so tests never
see each other's objects. `cli_env`, `ROOT` and `OWNED_KINDS` are the kit's.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from kit import fleets
from kit.fleets import APP_PARTS, OWNED_KINDS, RBAC_PARTS, manifests
from kit.fleets import ROOT as ROOT
from kit.fleets import cli_env as cli_env

FULL = bool(os.environ.get("FLEETPLAN_FULL"))

# category -> list of result rows (dicts); the session-finish hook in conftest.py writes the report.
RESULTS: dict[str, list[dict[str, Any]]] = defaultdict(list)


def record(category: str, **row: Any) -> dict[str, Any]:
    """Add a result row; returns it, so a test can complete it (e.g. `survived`) once it knows."""
    RESULTS[category].append(row)
    return row


def with_only(args: Sequence[str]) -> list[str]:
    """Engine commands are narrowed to the `resources` stack (the fleet file names a main stack)."""
    return [*args, "--only", "resources"] if args and args[0] in ("plan", "apply", "destroy", "graph") else list(args)


class ResourcesFleet(fleets.ResourcesFleet):
    """The kit's resources fleet with the Antrea stack named in its fleet file, its engine commands
    narrowed by `with_only`, and per-cluster kubeconfig overrides."""

    stack: Literal["none", "antrea"] = "antrea"

    def __init__(self, root: Path, lab: Any, kubeconfigs: Mapping[str, str] | None = None,
                 wait_timeout: str = "60s", prefix: str = "r") -> None:
        super().__init__(root, lab, prefix=prefix, kubeconfigs=kubeconfigs, wait_timeout=wait_timeout)

    def write_manifests(self, *, color: str, rbac: bool = True) -> None:
        """The application and (with `rbac`) its RBAC, all in one file, `extras/app.yaml`."""
        parts = (*APP_PARTS, *RBAC_PARTS) if rbac else APP_PARTS
        (self.root / "extras" / "app.yaml").write_text(manifests(self.ns, color, *parts))
        self.rbac = rbac

    def arguments(self, args: Sequence[str]) -> list[str]:
        return with_only(args)


def assert_clean_end_state(fleet: ResourcesFleet, *, destroyed: bool = False) -> None:
    """What a clean apply (or destroy) leaves: exactly the expected owned objects, the state
    recording exactly those with the live uids, no journal, no lock, and a plan with no changes."""
    live = fleet.owned_live()
    state = fleet.state()
    recorded = {r["address"]: r.get("uid") for r in state["resources"]}
    assert state.get("journal", []) == [], f"journal left: {state['journal']}"
    lock = fleet.state_path.with_name(fleet.state_path.name + ".lock")
    assert not lock.exists(), f"lock left behind: {lock.read_text()}"
    if destroyed:
        assert live == {}, f"orphans after destroy: {sorted(live)}"
        assert recorded == {}, f"state still records: {sorted(recorded)}"
        return
    assert len(live) == fleet.expected_count, f"{len(live)} owned objects, expected {fleet.expected_count}"
    assert set(recorded) == set(live), (f"state and clusters disagree: only in state {set(recorded) - set(live)}; "
                                        f"only live {set(live) - set(recorded)}")
    wrong_uid = {a for a, uid in recorded.items() if uid and uid != live[a]}
    assert not wrong_uid, f"state records stale uids for {wrong_uid}"
    plan = fleet.run("plan", "--detailed-exitcode", check=None)
    assert plan.returncode == 0, f"plan after resume is not empty:\n{plan.stdout}\n{plan.stderr}"


def run_in_process(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run the CLI's entry point in this process (no interpreter start-up): (exit, stdout, stderr).

    Used where many runs need no isolation; crash and lock tests always use real subprocesses.
    """
    import contextlib
    import io

    from fleetplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


STACK_KINDS = [*OWNED_KINDS, ("v1", "Service"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
               ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
               ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
               ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
               ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
               ("multicluster.crd.antrea.io/v1alpha2", "ClusterSet"),
               ("cluster.open-cluster-management.io/v1", "ManagedCluster"),
               ("cluster.open-cluster-management.io/v1beta2", "ManagedClusterSet"),
               ("operator.open-cluster-management.io/v1", "ClusterManager"),
               ("operator.open-cluster-management.io/v1", "Klusterlet")]


def assert_stack_end_state(state_path: Path, fleet_name: str, clusters: list[Any], plan: Any,
                           *, destroyed: bool = False) -> int:
    """The end state of a stack fleet after a resumed run: no journal, no lock, a plan with no
    changes, every recorded object live with its recorded uid, and every object on the clusters
    that carries the fleet's label recorded (no orphans); after destroy, nothing at all.
    `plan(*args)` runs `fleetplan plan ARGS` for that fleet. Returns the number of owned objects."""
    from fleetplan.addrs import Address
    from fleetplan.live.clusters import KubeCluster
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.reading import selector

    state = json.loads(state_path.read_text())
    assert state.get("journal", []) == [], f"journal left: {state['journal']}"
    lock = state_path.with_name(state_path.name + ".lock")
    assert not lock.exists(), f"lock left behind: {lock.read_text()}"
    apis = {c.name: KubeCluster(ClusterAccess(c.name, c.kubeconfig, c.context)) for c in clusters}
    live: dict[str, str] = {}
    for name, api in apis.items():
        for api_version, kind in STACK_KINDS:
            group = api_version.rpartition("/")[0]
            for obj in api.list(api_version, kind, "", selector(fleet_name)):
                meta = obj["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                live[str(Address(name, group, kind, meta.get("namespace") or "", meta["name"]))] = meta["uid"]
    recorded = {r["address"]: r for r in state["resources"]}
    if destroyed:
        assert live == {}, f"orphans after destroy: {sorted(live)}"
        assert recorded == {}, f"state still records: {sorted(recorded)}"
        done = plan("--destroy", "--detailed-exitcode")
        assert done.returncode == 0, done.stdout + done.stderr
        return 0
    orphans = set(live) - set(recorded)
    assert not orphans, f"owned objects the state does not record: {sorted(orphans)}"
    for address, record_ in recorded.items():
        parsed = Address.parse(address)
        if parsed.group.endswith("fleetplan.dev") or not record_.get("uid"):
            continue  # operations (tokens, acceptance) are not objects
        obj = apis[parsed.cluster].get(record_["api_version"], parsed.kind, parsed.namespace, parsed.name)
        assert obj is not None, f"state records {address}, which is not on the cluster"
        assert obj["metadata"]["uid"] == record_["uid"], f"state records a stale uid for {address}"
    done = plan("--detailed-exitcode")
    assert done.returncode == 0, f"plan after resume is not empty:\n{done.stdout}\n{done.stderr}"
    return len(live)
