"""`fleetplan graph`: the desired resources' dependency graph as DOT, Mermaid, SVG or PNG.

DOT and Mermaid are text fleetplan writes itself. SVG and PNG are drawn by Graphviz's `dot`
program when it is on PATH; when it is not, the command fails with the package to install and
the DOT alternative, before writing anything. PNG is binary, so it goes to `--output FILE`, or to
stdout only when stdout is not a terminal (`fleetplan graph --format png > graph.png`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click

from fleetplan.cli.planning import file_option, only_option
from fleetplan.config.loading import load_fleet
from fleetplan.errors import FleetplanError
from fleetplan.graph.building import build_graph
from fleetplan.graph.rendering import to_dot, to_mermaid
from fleetplan.plan import fleets

FORMATS = ("dot", "mermaid", "svg", "png")
GRAPHVIZ_HINT = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz), "
    "or print DOT and draw it elsewhere: fleetplan graph --format dot > graph.dot"
)


@click.command("graph")
@file_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="dot", show_default=True,
              help="dot and mermaid are text; svg and png need Graphviz's `dot` on PATH.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
@only_option
def graph(fleet_file: str, fmt: str, output: str | None, only: tuple[str, ...]) -> None:
    """Print the dependency graph (creation order; deletion is the reverse).

    \b
    Examples:
      fleetplan graph                          # Graphviz DOT on stdout
      fleetplan graph --format mermaid         # paste into Markdown (```mermaid)
      fleetplan graph --format svg -o fleet.svg
      fleetplan graph --format png > fleet.png
    """
    if fmt in ("svg", "png"):
        dot_program = graphviz_dot()  # fail before loading the fleet: nothing to gain without it
    # The graph is what the fleet file asks for: no cluster is contacted, so kubeconfigs are not read.
    built = build_graph(fleets.desired_for(load_fleet(fleet_file, offline=True), only).resources)
    if fmt in ("dot", "mermaid"):
        text = to_dot(built) if fmt == "dot" else to_mermaid(built)
        if output:
            Path(output).write_text(text)
        else:
            click.echo(text, nl=False)
        return
    if output is None and fmt == "png" and sys.stdout.isatty():
        raise FleetplanError("refusing to write a PNG to the terminal",
                             hint="add -o graph.png, or redirect: fleetplan graph --format png > graph.png")
    picture = draw(dot_program, to_dot(built), fmt)
    if output:
        Path(output).write_bytes(picture)
    else:
        sys.stdout.buffer.write(picture)
        sys.stdout.flush()


def graphviz_dot() -> str:
    """The path of Graphviz's `dot`, or an error naming the package that provides it."""
    found = shutil.which("dot")
    if found is None:
        raise FleetplanError("--format svg and png need Graphviz's `dot` program, which is not on PATH",
                             hint=GRAPHVIZ_HINT)
    return found


def draw(dot_program: str, source: str, fmt: str) -> bytes:
    """Run `dot -T<fmt>` on `source`; its complaints become one diagnostic."""
    try:
        done = subprocess.run([dot_program, f"-T{fmt}"], input=source.encode(), capture_output=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise FleetplanError(f"Graphviz `dot` could not run: {err}", hint=GRAPHVIZ_HINT) from err
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise FleetplanError(f"Graphviz `dot -T{fmt}` failed: {message[-1] if message else done.returncode}",
                             hint="print the DOT source with --format dot and check it with `dot -v`")
    return done.stdout
