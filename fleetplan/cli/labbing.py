"""`fleetplan lab up|down|status|kubeconfig`: the local lab of real control planes.

A thin view over `fleetplan.lab`: it parses options, calls the lab API, and prints paths and
addresses. It never prints kubeconfig contents (they hold client keys); `kubeconfig` prints a path,
so `export KUBECONFIG=$(fleetplan lab kubeconfig)` works.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from fleetplan.cli import echo
from fleetplan.errors import LabError

_DIR_HELP = "The lab's state directory (default: $FLEETPLAN_LAB_DIR, else ./.lab)."


def _dir(value: str | None) -> Path:
    from fleetplan.lab import default_dir

    return Path(value).absolute() if value else default_dir()


@click.group("lab")
def lab() -> None:
    """Run real local Kubernetes control planes (etcd, API server, controllers, scheduler, kwok).

    \b
    Examples:
      fleetplan lab up --clusters 3
      fleetplan lab status
      export KUBECONFIG=$(fleetplan lab kubeconfig)
      fleetplan lab down
    """


@lab.command("up")
@click.option("--clusters", "-n", type=click.IntRange(1, 16), default=3, show_default=True,
              help="How many clusters to start (in parallel).")
@click.option("--name", "prefix", default="c", show_default=True,
              help="Cluster name prefix: clusters are PREFIX1..PREFIXN.")
@click.option("--dir", "lab_dir", default=None, help=_DIR_HELP)
@click.option("--first-index", type=click.IntRange(1, 254), default=None,
              help="Use cluster indices from here (cluster index i: API on 127.0.i.1, pods 10.i.0.0/16). "
                   "Default: the lowest indices no other lab holds.")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Seconds to wait per cluster.")
@click.option("--bin", "bin_dir", default=None,
              help="Directory of the lab binaries (default: $FLEETPLAN_LAB_BIN).")
def up_command(clusters: int, prefix: str, lab_dir: str | None, first_index: int | None, timeout: float,
               bin_dir: str | None) -> None:
    """Start N clusters and write one kubeconfig per cluster plus a merged one.

    \b
    Examples:
      fleetplan lab up
      fleetplan lab up --clusters 5 --name edge
    """
    from fleetplan.lab import status, up

    started = time.monotonic()
    made = up(clusters, prefix, _dir(lab_dir), first_index=first_index, timeout=timeout, bin_dir=bin_dir)
    elapsed = time.monotonic() - started
    found = status(made.dir)
    rss = found.rss_bytes if found else 0
    echo(f"lab up: {len(made.clusters)} clusters in {elapsed:.1f}s, {rss / 2**20:.0f} MiB resident")
    for cluster in made.clusters:
        echo(f"  {cluster.name:<8} {cluster.server:<28} kubeconfig {cluster.kubeconfig}")
    echo(f"merged kubeconfig (one context per cluster): {made.kubeconfig}")
    echo(f"  export KUBECONFIG={made.kubeconfig}")


@lab.command("down")
@click.option("--dir", "lab_dir", default=None, help=_DIR_HELP)
def down_command(lab_dir: str | None) -> None:
    """Stop every process the lab started; logs stay in the directory.

    \b
    Examples:
      fleetplan lab down
    """
    from fleetplan.lab import down

    where = _dir(lab_dir)
    stopped = down(where)
    echo(f"lab down: stopped {stopped} processes in {where}" if stopped
         else f"lab down: nothing running in {where}")


@lab.command("status")
@click.option("--dir", "lab_dir", default=None, help=_DIR_HELP)
def status_command(lab_dir: str | None) -> None:
    """Show each cluster's components and API server health; exit 1 unless all are up.

    \b
    Examples:
      fleetplan lab status
    """
    from fleetplan.lab import status

    where = _dir(lab_dir)
    found = status(where)
    if found is None:
        raise LabError(f"no lab in {where}", hint="start one with `fleetplan lab up`")
    for c in found.clusters:
        state = "up" if c.up else "DOWN"
        down_parts = [name for name, running in c.components.items() if not running]
        detail = f"not running: {', '.join(down_parts)}" if down_parts else (
            "all components running" + ("" if c.api_ready else ", API server not ready"))
        mib = c.rss_bytes / 2**20
        echo(f"{c.cluster.name:<8} {state:<5} {c.cluster.server:<28} {mib:6.0f} MiB  {detail}")
    echo(f"total resident memory: {found.rss_bytes / 2**20:.0f} MiB")
    if not found.up:
        raise LabError(f"the lab in {where} is not fully up",
                       hint="see the logs in each cluster's logs/ directory")


@lab.command("kubeconfig")
@click.option("--dir", "lab_dir", default=None, help=_DIR_HELP)
@click.option("--cluster", default=None,
              help="Print this cluster's own kubeconfig path instead of the merged one.")
def kubeconfig_command(lab_dir: str | None, cluster: str | None) -> None:
    """Print the path of the merged kubeconfig (or of one cluster's).

    \b
    Examples:
      export KUBECONFIG=$(fleetplan lab kubeconfig)
      kubectl --kubeconfig "$(fleetplan lab kubeconfig --cluster c2)" get ns
    """
    from fleetplan.lab import read_lab

    where = _dir(lab_dir)
    found = read_lab(where)
    if found is None:
        raise LabError(f"no lab in {where}", hint="start one with `fleetplan lab up`")
    if cluster is None:
        echo(str(found.kubeconfig))
        return
    try:
        echo(found[cluster].kubeconfig)
    except KeyError:
        raise LabError(f"no cluster {cluster!r} in the lab in {where}",
                       hint="clusters: " + ", ".join(c.name for c in found.clusters)) from None
