"""Split control on the lab: a leader-only fleet, `fleetplan join-config export`, and a member-only
fleet that converges its member holding no credentials for the leader."""

from __future__ import annotations

import base64
import stat

import pytest
from conftest import AntreaLab, changes, converge, failures, replan
from kit.fleets import run_cli
from ruamel.yaml import YAML

from fleetplan.cli.planning import Session
from fleetplan.lab.clusters import admin_rest

pytestmark = pytest.mark.integration


def test_split_flow_converges_the_member_without_leader_credentials(antrea_lab: AntreaLab) -> None:
    env = antrea_lab
    member = env.members[0]
    leader_fleet = env.write("leader", {"leader": env.leader_spec(), "antrea": {"joinMembers": [member.name]}},
                             fleet_name=f"lead-{env.suffix}")
    plan, summary = converge(leader_fleet)
    assert not failures(summary), failures(summary)
    made = {a for _, a in changes(plan)}
    assert f"{env.leader.name}/core/ServiceAccount/{env.ns}/member-{member.name}-token" in made
    assert not any("BoundToken" in a for a in made)  # the export mints it, not apply
    assert all(a.startswith(f"{env.leader.name}/") for a in made)

    join = env.tmp / "handed-over" / f"{member.name}-join.yaml"
    done = run_cli("--no-color", "join-config", "export", "--member", member.name, "-o", str(join), "-f",
                   str(leader_fleet), cwd=env.tmp, check=None, timeout=120)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(join.stat().st_mode) == 0o600
    head, secret = list(YAML(typ="safe").load_all(join.read_text()))
    assert (head["kind"], head["clusterID"], head["leaderClusterID"], head["leaderAPIServer"]) == (
        "ClusterSetJoinConfig", member.name, env.leader.name, env.leader.server)
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert token and token not in done.stdout + done.stderr
    refused = run_cli("--no-color", "join-config", "export", "--member", "nobody", "-o", str(env.tmp / "x"),
                      "-f", str(leader_fleet), cwd=env.tmp, check=None, timeout=120)
    assert refused.returncode == 1 and "not declared" in refused.stderr and not (env.tmp / "x").exists()

    member_fleet = env.write("member", {"leader": {"joinConfig": str(join)}, "members": [env.member_spec(member)]},
                             fleet_name=f"east-{env.suffix}")
    session = Session.open(str(member_fleet))
    assert [c.name for c in session.fleet.clusters()] == [member.name]  # no leader kubeconfig at all
    assert {r.address.cluster for r in session.desired.resources} == {member.name}
    _, summary = converge(member_fleet)
    assert not failures(summary), "\n".join(failures(summary) + env.logs[-10:])
    mca = f"/apis/multicluster.crd.antrea.io/v1alpha1/namespaces/{env.ns}/memberclusterannounces/" \
          f"member-announce-from-{member.name}"
    assert admin_rest(env.leader).get(mca)["clusterID"] == member.name
    assert env.controllers[env.leader.name].announcers[f"member-announce-from-{member.name}"] == \
        f"system:serviceaccount:{env.ns}:member-{member.name}-token"
    assert changes(replan(member_fleet)) == set()
    assert changes(replan(leader_fleet)) == set()
