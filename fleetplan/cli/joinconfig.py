"""`fleetplan join-config export`: the file a member team needs to join a leader they cannot administer.

    fleetplan join-config export --member east -o east-join.yaml [-f fleet.yaml] [--format antrea|fleetplan]

The member must be declared in the leader's fleet, so that its identity there is part of the plan
and goes away with it: in `spec.members` (a fleet that also converges the member), or in
`spec.antrea.joinMembers` (a member run by another team; fleetplan never connects to it). After
`fleetplan apply` has created its ServiceAccount and RoleBinding on the leader, the export gets a
token for it through the engine's live layer, as apply would: `tokens.kind: bound` mints a fresh
TokenRequest valid for `tokens.ttl` (export again to hand out a new one; removing the member from
the fleet deletes the ServiceAccount, which revokes every token minted for it), `secret` reads the
long-lived token Secret apply created.

Invariants: the token goes from memory into the file and nowhere else (never printed, logged or
stored in the state); the file is created with mode 0600 before a byte is written; `-o` is
required, so a token never passes through a terminal.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from fleetplan.addrs import Address
from fleetplan.cli.planning import file_option
from fleetplan.config.loading import load_fleet
from fleetplan.config.models import Fleet
from fleetplan.errors import ClusterError, ConfigError


def _member_names(fleet: Fleet) -> tuple[str, ...]:
    return tuple(m.name for m in fleet.spec.members) + tuple(fleet.spec.antrea.join_members)


def _check_member(fleet: Fleet, member: str) -> None:
    if fleet.spec.stack != "antrea":
        raise ConfigError(f"join-config export is for Antrea fleets; this fleet's stack is {fleet.spec.stack}",
                          address="spec.stack", hint="OCM spokes join with the bootstrap kubeconfig apply writes")
    if fleet.is_member_only:
        raise ConfigError("a member-only fleet holds no credentials for the leader, so it cannot export "
                          "join files", address="spec.leader.joinConfig",
                          hint="run the export with the leader's fleet")
    names = _member_names(fleet)
    if member not in names:
        close = difflib.get_close_matches(member, names, n=1)
        raise ConfigError(
            f"member {member!r} is not declared in this fleet", address="spec.antrea.joinMembers",
            hint=f"did you mean {close[0]!r}?" if close else
            "add it to spec.antrea.joinMembers (a member another team runs) and run `fleetplan apply` first")


@click.group("join-config")
def join_config() -> None:
    """Hand out join files for members run by other teams.

    \b
    Examples:
      fleetplan join-config export --member east -o east-join.yaml
    """


@join_config.command("export")
@click.option("--member", "member", required=True, metavar="NAME", help="The member's cluster ID.")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the join file (created with mode 0600; it holds a token).")
@file_option
@click.option("--format", "fmt", type=click.Choice(["antrea", "fleetplan"]), default="antrea",
              show_default=True, help="antrea: ClusterSetJoinConfig plus the token Secret (antctl mc join "
              "--config-file reads it too); fleetplan: one fleetplan.dev JoinConfig document.")
def export(member: str, output: Path, fleet_file: str, fmt: str) -> None:
    """Write MEMBER's join file: leader ID, API server, CA, namespace and a token.

    \b
    Examples:
      fleetplan join-config export --member east -o east-join.yaml
      fleetplan join-config export --member east -o east-join.yaml --format fleetplan
    """
    from fleetplan.live import handlers
    from fleetplan.plan import fleets
    from fleetplan.stacks.antrea import leader_server as find_leader_server
    from fleetplan.stacks.antrea import token_address, token_name
    from fleetplan.stacks.joinconfigs import JoinConfig, render_join_config, write_private_file

    fleet = load_fleet(fleet_file)
    _check_member(fleet, member)
    spec = fleet.spec
    shared = spec.tokens.strategy == "shared" and member not in spec.antrea.join_members
    name = token_name(member, shared)
    namespace = spec.cluster_set.namespace
    server = find_leader_server(fleet)
    leader = fleets.connect({fleet.leader_name: fleets.accesses_for(fleet)[fleet.leader_name]})[fleet.leader_name]
    account = leader.get("v1", "ServiceAccount", namespace, name)
    if account is None:
        raise ClusterError(f"ServiceAccount {namespace}/{name} for member {member} is not on the leader "
                           f"{fleet.leader_name} yet", hint="run `fleetplan apply` with this fleet first")
    bound = (account["metadata"].get("annotations") or {}).get("multicluster.antrea.io/cluster-id")
    if not shared and bound != member:
        raise ClusterError(f"ServiceAccount {namespace}/{name} on {fleet.leader_name} is bound to cluster ID "
                           f"{bound!r}, not {member!r}", hint="run `fleetplan apply` to correct it, then export")
    address = token_address(fleet, name)
    work = handlers.Work(address=address, api_version="v1" if address.kind == "Secret" else "", body=None,
                         options={"serviceAccount": name, "ttlSeconds": spec.tokens.ttl_seconds})
    if spec.tokens.kind == "bound":
        result = handlers.lookup("bound-token").converge(leader, work, lambda _: None)
        valid = f"valid until {result.outputs.get('expiry', '?')}"
    else:
        result = handlers.lookup("secret-token").read(leader, work)
        valid = "long-lived"
    if not result.secrets.get("token"):
        raise ClusterError(f"{Address.parse(str(address))} holds no token yet",
                           hint="wait for the token controller, then export again")
    join = JoinConfig(cluster_set_id=spec.cluster_set.name, leader_cluster_id=fleet.leader_name,
                      leader_namespace=namespace, leader_api_server=server, cluster_id=member,
                      namespace=spec.antrea.member_namespace, token_secret_name=name,
                      token=result.secrets["token"], ca_crt=result.secrets.get("ca.crt", ""))
    write_private_file(output, render_join_config(join, fmt))
    click.echo(f"Wrote the join file for member {member} to {output} (mode 0600; token {valid}).")
    click.echo(f"It holds a credential: hand it to {member}'s team privately. They join with "
               "`leader: {joinConfig: FILE}` in their fleet, or `antctl mc join --config-file FILE`.")
