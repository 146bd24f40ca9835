"""Removing a spoke from an OCM fleet: the ManifestWork guard runs first and a refusal stops
everything of that spoke; with --force the spoke is unjoined before its hub-side objects go.

The plan is made by the real planner from the rendered fleets and a state as a full apply records
it; the walk is the real walker with an executor that runs the real guard against a small fake hub.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fleetplan.addrs import Address
from fleetplan.apply.hooks import Hook, Status
from fleetplan.apply.walking import walk_plan
from fleetplan.config.models import Fleet
from fleetplan.graph.building import build_graph
from fleetplan.live import reading
from fleetplan.live.handlers import Result
from fleetplan.live.ocm_accept import check_no_manifest_works
from fleetplan.live.ocm_handlers import register_ocm_handlers
from fleetplan.plan import planning
from fleetplan.plan.model import Action, Plan, Step
from fleetplan.stacks.bundles import BundleSource
from fleetplan.stacks.ocm import render_ocm
from fleetplan.state.model import ResourceRecord, State

MIRROR = Path(os.environ.get("FLEETPLAN_MIRROR") or Path(__file__).resolve().parents[4] / "shared" / "upstream")
ACCEPT = Address.parse("hub/fleetplan.dev/ClusterAcceptance/-/west")
RELEASE = Address.parse("hub/fleetplan.dev/ClusterRelease/-/west")


def _kubeconfig(tmp: Path, name: str) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(f"clusters: [{{name: {name}, cluster: {{server: 'https://{name}.example:6443'}}}}]\n"
                    f"contexts: [{{name: {name}, context: {{cluster: {name}}}}}]\ncurrent-context: {name}\n")
    return str(path)


def _fleet(tmp: Path, members: tuple[str, ...]) -> Fleet:
    return Fleet.model_validate({
        "apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "demo"},
        "spec": {"stack": "ocm", "version": "v1.3.1", "clusterSet": {"name": "set"},
                 "leader": {"name": "hub", "kubeconfig": _kubeconfig(tmp, "hub")},
                 "members": [{"name": m, "kubeconfig": _kubeconfig(tmp, m)} for m in members]}})


def _removal_plan(tmp: Path, force: bool) -> Plan:
    """The plan after `west` is dropped from a converged hub + west + east fleet."""
    register_ocm_handlers()
    source = BundleSource(mirror=MIRROR)
    full = render_ocm(_fleet(tmp, ("west", "east")), source)
    graph = build_graph(full.resources)
    state, live = State.new("demo"), {}
    for r in full.resources:
        deps = tuple(sorted(graph.dependencies(r.address), key=str))
        state = state.with_record(ResourceRecord(r.address, str(r.body.get("apiVersion", "")), r.handler.value,
                                                 uid="u", depends_on=deps))
        live[r.address] = {"metadata": {"uid": "u"}}
    smaller = render_ocm(_fleet(tmp, ("east",)), source)
    return planning.decide(smaller, build_graph(smaller.resources), state, reading.Snapshot(live),
                           lambda _a, body: body, planning.Options(force=force))


class _Hub:
    """What the guard reads: one ManifestWork in the spoke's namespace."""

    name = "hub"

    def list_manifest_works(self, namespace: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "app", "namespace": namespace}}]


class _GuardedExecutor:
    """Runs the real ManifestWork guard for the acceptance's removal; records every other step."""

    def __init__(self) -> None:
        self.ran: list[Address] = []

    def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
        if step.address == ACCEPT:
            check_no_manifest_works(_Hub(), "west", bool(step.options.get("force")))  # type: ignore[arg-type]
        self.ran.append(step.address)
        return Result()


def _deletes(plan: Plan) -> Mapping[Address, Step]:
    return {s.address: s for s in plan.steps if s.action == Action.DELETE}


def test_a_refused_removal_deletes_nothing_of_the_spoke(tmp_path: Path) -> None:
    plan = _removal_plan(tmp_path, force=False)
    deletes = _deletes(plan)
    assert ACCEPT in deletes and RELEASE in deletes
    assert all(a.cluster == "west" or "west" in a.name for a in deletes), sorted(map(str, deletes))
    executor = _GuardedExecutor()
    summary = walk_plan(plan, executor, Hook(), parallelism=4)
    assert not [a for a in executor.ran if a in deletes]
    [failure] = summary.failures
    assert failure.step.address == ACCEPT and failure.error is not None
    assert "ManifestWork" in failure.error.summary and "refusing" in failure.error.summary
    assert {o.step.address for o in summary.skipped} == set(deletes) - {ACCEPT}
    assert all(o.root_cause == ACCEPT for o in summary.skipped)


def test_forced_removal_unjoins_the_spoke_before_releasing_it_on_the_hub(tmp_path: Path) -> None:
    plan = _removal_plan(tmp_path, force=True)
    assert all(s.options.get("force") is True for s in _deletes(plan).values())
    executor = _GuardedExecutor()
    summary = walk_plan(plan, executor, Hook(), parallelism=1)
    assert all(o.status == Status.OK for o in summary.outcomes)
    order = [a for a in executor.ran if a in _deletes(plan)]
    assert order[0] == ACCEPT
    on_spoke = [i for i, a in enumerate(order) if a.cluster == "west"]
    assert on_spoke and max(on_spoke) < order.index(RELEASE)
    # The bootstrap identity goes after the release (the agent cannot re-create its cluster then).
    identity = [i for i, a in enumerate(order) if a.cluster == "hub" and a not in (ACCEPT, RELEASE)]
    assert identity and min(identity) > order.index(RELEASE)
