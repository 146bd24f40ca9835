"""`fleetplan plan` and `fleetplan show`, plus the wiring every engine command shares.

`plan` reads the fleet, the state (without locking: it changes nothing) and the clusters, and
prints the plan (human or `--json`); `-out FILE` saves it for `apply FILE`. With
`--detailed-exitcode` the exit status is 0 for no changes, 2 for changes, 1 for errors. A cluster
that cannot be read does not hide the others' plan: its steps are shown as unknown, and the
command exits 1 naming it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from fleetplan.cli import echo
from fleetplan.config.loading import load_fleet
from fleetplan.config.models import Fleet
from fleetplan.errors import ClusterError, ExitCode
from fleetplan.graph.building import build_graph
from fleetplan.plan import fleets, planfile, planning, rendering
from fleetplan.plan.model import Mode, Plan
from fleetplan.plan.stores import AnyStore, open_store
from fleetplan.stacks.desired import DesiredFleet
from fleetplan.state.model import State

file_option = click.option(
    "-f",
    "--file",
    "fleet_file",
    default="fleet.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The fleet file.",
)
only_option = click.option(
    "--only", "only", multiple=True, hidden=True, help="Plan only these stacks (antrea, ocm, resources)."
)


@dataclass
class Session:
    """What one engine command works with, loaded once."""

    fleet: Fleet
    desired: DesiredFleet
    store: AnyStore

    @classmethod
    def open(cls, fleet_file: str, only: tuple[str, ...] = ()) -> Session:
        fleet = load_fleet(fleet_file)
        desired = fleets.desired_for(fleet, only)
        store = open_store(fleet, Path(fleet_file).resolve().parent)
        return cls(fleet, desired, store)

    def make_plan(self, state: State | None, options: planning.Options) -> Plan:
        accesses = fleets.accesses_for(self.fleet)
        clusters = fleets.connect(accesses)
        return planning.plan_fleet(self.desired, clusters, state, options, accesses)


def color_enabled(no_color: bool) -> bool:
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().obj if ctx else None
    return bool(not no_color and root and root.get("color") and sys.stdout.isatty())


def print_plan(plan: Plan, *, as_json: bool, color: bool) -> None:
    if as_json:
        click.echo(rendering.render_json(plan), nl=False)
    else:
        click.echo(rendering.render_human(plan, color=color), nl=False)


@click.command("plan")
@file_option
@click.option("-out", "--out", "out", type=click.Path(dir_okay=False), help="Save the plan for `apply FILE`.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as versioned JSON (docs/json-format.md)."
)
@click.option("--detailed-exitcode", is_flag=True, help="Exit 0: no changes, 1: error, 2: changes.")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="ADDR",
    help="Only this address (or prefix) and what it depends on. Repeatable.",
)
@click.option("--refresh-only", is_flag=True, help="Report changes made outside fleetplan; change nothing.")
@click.option("--destroy", is_flag=True, help="Plan to destroy everything this fleet created.")
@click.option("--no-color", is_flag=True, help="Never colour output.")
@only_option
def plan(
    fleet_file: str,
    out: str | None,
    as_json: bool,
    detailed_exitcode: bool,
    targets: tuple[str, ...],
    refresh_only: bool,
    destroy: bool,
    no_color: bool,
    only: tuple[str, ...],
) -> None:
    """Show what apply would change.

    \b
    Examples:
      fleetplan plan
      fleetplan plan -out fleet.plan               # then: fleetplan apply fleet.plan
      fleetplan plan --detailed-exitcode          # CI: 0 no changes, 1 error, 2 changes
      fleetplan plan --json | jq .summary
      fleetplan plan --target west                # one cluster and its dependencies
      fleetplan plan --refresh-only               # drift only
      fleetplan plan --destroy
    """
    session = Session.open(fleet_file, only)
    state = session.store.read()
    mode = Mode.DESTROY if destroy else Mode.REFRESH_ONLY if refresh_only else Mode.NORMAL
    if targets:
        planning.targets_known(build_graph(session.desired.resources), targets)
    result = session.make_plan(
        state,
        planning.Options(mode=mode, targets=targets, wait_timeout=session.fleet.spec.wait.timeout_seconds),
    )
    print_plan(result, as_json=as_json, color=color_enabled(no_color))
    if out:
        planfile.save(result, out)
        if not as_json:
            echo(f"\nSaved the plan to {out}. Apply exactly this plan with: fleetplan apply {out}")
    if result.errors:  # an unreachable cluster: the plan is shown, but it is incomplete
        raise ClusterError(result.errors)
    if detailed_exitcode and result.has_changes:
        sys.exit(int(ExitCode.CHANGES))


@click.command("show")
@click.argument("planfile_path", required=False, metavar="[PLANFILE]")
@file_option
@click.option("--json", "as_json", is_flag=True, help="Print as versioned JSON.")
@click.option("--no-color", is_flag=True, help="Never colour output.")
def show(planfile_path: str | None, fleet_file: str, as_json: bool, no_color: bool) -> None:
    """Show a saved plan, or the state when no plan file is given.

    \b
    Examples:
      fleetplan show fleet.plan
      fleetplan show fleet.plan --json
      fleetplan show                              # the state
    """
    if planfile_path:
        print_plan(planfile.load(planfile_path), as_json=as_json, color=color_enabled(no_color))
        return
    fleet = load_fleet(fleet_file)
    state = open_store(fleet, Path(fleet_file).resolve().parent).read()
    if state is None:
        click.echo("No state." if not as_json else "{}")
        return
    from fleetplan.state import model

    if as_json:
        click.echo(model.dumps(state), nl=False)
        return
    click.echo(f"# fleet {state.fleet}, lineage {state.lineage}, serial {state.serial}")
    for address in sorted(state.resources, key=str):
        record = state.resources[address]
        click.echo(f"{address}  uid={record.uid or '-'}  {_outputs(record.outputs)}".rstrip())
    for entry in state.journal:
        click.echo(f"! unfinished {entry.action} of {entry.address} (run {entry.run_id}, {entry.started_at})")


def _outputs(outputs: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(outputs.items()))
