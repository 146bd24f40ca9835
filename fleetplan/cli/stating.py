"""`fleetplan state list|show|rm` and `fleetplan force-unlock ID`.

`state rm` only forgets: the object stays on the cluster and fleetplan stops managing it (the next
plan reports it as not created by this fleet if its labels remain). It takes the lock like apply.
"""

from __future__ import annotations

from pathlib import Path

import click

from fleetplan.addrs import Address
from fleetplan.cli.planning import file_option
from fleetplan.config.loading import load_fleet
from fleetplan.errors import StateError
from fleetplan.plan.stores import AnyStore, open_store


def _store(fleet_file: str) -> AnyStore:
    fleet = load_fleet(fleet_file)
    return open_store(fleet, Path(fleet_file).resolve().parent)


@click.group("state")
def state() -> None:
    """Inspect or edit the state.

    \b
    Examples:
      fleetplan state list
      fleetplan state show west/core/Secret/kube-system/member-token
      fleetplan state rm west/core/ConfigMap/apps/settings
    """


@state.command("list")
@file_option
def state_list(fleet_file: str) -> None:
    """List the addresses fleetplan manages.

    \b
    Examples:
      fleetplan state list
      fleetplan state list -f fleets/prod.yaml
    """
    current = _store(fleet_file).read()
    for address in sorted(current.resources if current else (), key=str):
        click.echo(str(address))


@state.command("show")
@click.argument("address")
@file_option
def state_show(address: str, fleet_file: str) -> None:
    """Show one recorded resource (no secret values are ever recorded).

    \b
    Examples:
      fleetplan state show west/core/Secret/kube-system/member-token
    """
    current = _store(fleet_file).read()
    record = current.resources.get(Address.parse(address)) if current else None
    if record is None:
        raise StateError(f"{address} is not in the state", hint="see `fleetplan state list`")
    click.echo(f"address:      {record.address}")
    click.echo(f"apiVersion:   {record.api_version or '-'}")
    click.echo(f"handler:      {record.handler}")
    click.echo(f"uid:          {record.uid or '-'}")
    click.echo(f"applied hash: {record.applied_hash}")
    click.echo(f"updated:      {record.updated_at}")
    for name, dep in enumerate(record.depends_on):
        click.echo(f"depends on:   {dep}" if name == 0 else f"              {dep}")
    for key, value in sorted(record.outputs.items()):
        click.echo(f"output {key}: {value}")
    for key, digest in sorted(record.secret_hashes.items()):
        click.echo(f"secret {key}: (sensitive value, {digest[:19]}...)")


@state.command("rm")
@click.argument("addresses", nargs=-1, required=True)
@file_option
def state_rm(addresses: tuple[str, ...], fleet_file: str) -> None:
    """Forget addresses without touching the clusters.

    \b
    Examples:
      fleetplan state rm west/core/ConfigMap/apps/settings
    """
    store = _store(fleet_file)
    with store.locked("state rm"):
        current = store.read()
        if current is None:
            raise StateError("there is no state yet")
        wanted = [Address.parse(a) for a in addresses]
        missing = [str(a) for a in wanted if a not in current.resources]
        if missing:
            raise StateError(f"{missing[0]} is not in the state", hint="see `fleetplan state list`")
        for address in wanted:
            current = current.without(address)
        store.persist(current)
    for address in wanted:
        click.echo(f"Removed {address} from the state (left on the cluster).")


@click.command("force-unlock")
@click.argument("lock_id")
@file_option
def force_unlock(lock_id: str, fleet_file: str) -> None:
    """Release a lock left by a run that is gone. Only when you are sure it is not running.

    \b
    Examples:
      fleetplan force-unlock 3f2a9c1e                # the ID the lock error printed
    """
    held = _store(fleet_file).force_unlock(lock_id)
    click.echo(f"Released the lock held by {held.describe()}.")
