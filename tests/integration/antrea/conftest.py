"""Helpers for the Antrea integration tests: fleets on the lab, the real engine, the SIMULATIONS.

The leader is the lab's first cluster, the members its second and third. The Antrea controllers
cannot run here: `ControllerSimulation` (webhooks, caBundle, leader status) and
`MemberAgentSimulation` (announces with only the delivered token) stand in for them, and start
as soon as fleetplan has created what they need.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kit.fleets import MIRROR

from fleetplan.apply.executing import ClusterExecutor
from fleetplan.apply.hooks import ApplySummary
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import walk_plan
from fleetplan.cli.planning import Session
from fleetplan.errors import FleetplanError
from fleetplan.lab import Lab, LabCluster
from fleetplan.lab.simulators.antrea import ControllerSimulation, MemberAgentSimulation
from fleetplan.plan import fleets, planning
from fleetplan.plan.model import Action, Mode, Plan

MC = "multicluster.crd.antrea.io"


def converge(fleet_file: Path, mode: Mode = Mode.NORMAL, force: bool = False) -> tuple[Plan, ApplySummary]:
    """Plan and apply with the real engine, as `fleetplan apply --auto-approve` does."""
    session = Session.open(str(fleet_file))
    state = session.store.read()
    timeout = session.fleet.spec.wait.timeout_seconds
    plan = session.make_plan(state, planning.Options(mode=mode, force=force, wait_timeout=timeout))
    clusters = fleets.connect(fleets.accesses_for(session.fleet))
    summary = walk_plan(plan, ClusterExecutor(plan, clusters, default_timeout=timeout),
                        StateRecorder(session.store, state, session.fleet.name))
    return plan, summary


def replan(fleet_file: Path, mode: Mode = Mode.NORMAL) -> Plan:
    session = Session.open(str(fleet_file))
    return session.make_plan(session.store.read(), planning.Options(mode=mode))


def changes(plan: Plan) -> set[tuple[str, str]]:
    """(action, address) of every step that does something."""
    return {(s.action.value, str(s.address)) for s in plan.steps if s.action != Action.NOOP}


def failures(summary: ApplySummary) -> list[str]:
    return [f"{o.step.address}: {o.error.summary if o.error else o.root_cause}"
            for o in (*summary.failures, *summary.skipped)]


@dataclass
class AntreaLab:
    """One test's fleet: unique names, its simulations, and how to write its fleet files."""

    lab: Lab
    tmp: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    logs: list[str] = field(default_factory=list)
    controllers: dict[str, ControllerSimulation] = field(default_factory=dict)
    agents: dict[str, MemberAgentSimulation] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)

    @property
    def leader(self) -> LabCluster:
        return self.lab.clusters[0]

    @property
    def members(self) -> tuple[LabCluster, ...]:
        return self.lab.clusters[1:3]

    @property
    def ns(self) -> str:
        return f"mc-{self.suffix}"

    @property
    def set_id(self) -> str:
        return f"set-{self.suffix}"

    def start_simulations(self) -> None:
        self.controllers[self.leader.name] = ControllerSimulation(
            self.leader, self.ns, "leader", log=self.logs.append).start_in_background(timeout=300, interval=0.5)
        for member in self.members:
            self.controllers[member.name] = ControllerSimulation(
                member, "kube-system", "member", log=self.logs.append).start_in_background(timeout=300)
            self.agents[member.name] = MemberAgentSimulation(member, log=self.logs.append).start(interval=0.5)

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        for sim in self.controllers.values():
            sim.stop()

    def write(self, name: str, spec: dict[str, Any], fleet_name: str | None = None,
              state: str | None = None) -> Path:
        """A fleet file `name` for this test's ClusterSet; its state is `state` (default: `name`)."""
        base: dict[str, Any] = {
            "stack": "antrea", "version": "v2.7.0", "manifests": {"mirror": str(MIRROR)},
            "clusterSet": {"name": self.set_id, "namespace": self.ns}, "wait": {"timeout": "2m"},
            "state": {"path": str(self.tmp / f"{state or name}.state.json")}}
        doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet",
               "metadata": {"name": fleet_name or f"antrea-{self.suffix}"}, "spec": {**base, **spec}}
        path = self.tmp / f"{name}.yaml"
        path.write_text(json.dumps(doc, indent=1))
        if path not in self.written:
            self.written.append(path)
        return path

    def clean_up(self) -> list[str]:
        """Destroy what every fleet of this test still holds (members' fleets first); problems found."""
        problems = []
        first: dict[str, Path] = {}  # per state, the first fleet written (the fullest one)
        for path in self.written:
            first.setdefault(json.loads(path.read_text())["spec"]["state"]["path"], path)
        for path in reversed(list(first.values())):
            try:
                _, summary = converge(path, Mode.DESTROY, force=True)
                problems += failures(summary)
            except FleetplanError as err:
                problems.append(str(err))
        return problems

    def leader_spec(self) -> dict[str, Any]:
        lead = self.leader
        return {"name": lead.name, "kubeconfig": lead.kubeconfig, "context": lead.context,
                "apiServer": lead.server}

    def member_spec(self, member: LabCluster) -> dict[str, Any]:
        return {"name": member.name, "kubeconfig": member.kubeconfig, "context": member.context}

    def full_fleet(self, members: tuple[LabCluster, ...] | None = None, name: str = "fleet", **extra: Any) -> Path:
        """The leader and `members` (default: both); every variant shares one state."""
        chosen = self.members if members is None else members
        return self.write(name, {"leader": self.leader_spec(),
                                 "members": [self.member_spec(m) for m in chosen], **extra}, state="fleet")


@pytest.fixture
def antrea_lab(lab: Lab, tmp_path: Path) -> Iterator[AntreaLab]:
    env = AntreaLab(lab, tmp_path)
    env.start_simulations()
    try:
        yield env
    finally:
        try:
            leftovers = env.clean_up()  # the lab is shared by the next test: leave it as it was
        finally:
            env.stop()
        assert not leftovers, leftovers
