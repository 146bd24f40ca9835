"""`fleetplan graph`: the desired resources' dependency graph as Graphviz DOT or Mermaid."""

from __future__ import annotations

import click

from fleetplan.cli.planning import file_option, only_option
from fleetplan.config.loading import load_fleet
from fleetplan.graph.building import build_graph
from fleetplan.graph.rendering import to_dot, to_mermaid
from fleetplan.plan import fleets


@click.command("graph")
@file_option
@click.option("--format", "fmt", type=click.Choice(["dot", "mermaid"]), default="dot", show_default=True)
@only_option
def graph(fleet_file: str, fmt: str, only: tuple[str, ...]) -> None:
    """Print the dependency graph (creation order; deletion is the reverse)."""
    built = build_graph(fleets.desired_for(load_fleet(fleet_file), only).resources)
    click.echo(to_dot(built) if fmt == "dot" else to_mermaid(built), nl=False)
