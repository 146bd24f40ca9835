"""`fleetplan init`: write a commented, valid fleet.yaml from kubeconfigs or contexts."""

from __future__ import annotations

from pathlib import Path

import click

from fleetplan.cli import echo
from fleetplan.errors import ConfigError


@click.command("init")
@click.option("--kubeconfig-dir", type=click.Path(file_okay=False, path_type=Path),
              help="A directory with one kubeconfig per cluster; clusters are named after the files.")
@click.option("--contexts", help="Comma-separated contexts of one kubeconfig (see --kubeconfig).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              help="The kubeconfig for --contexts (default: $KUBECONFIG, then ~/.kube/config).")
@click.option("--leader", help="Which cluster leads (Antrea leader / OCM hub); default: the first.")
@click.option("--stack", type=click.Choice(["antrea", "ocm"]), default="antrea", show_default=True)
@click.option("--name", default="fleet", show_default=True, help="The fleet's name (metadata.name).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("fleet.yaml"),
              show_default=True, help="Where to write the fleet file.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(kubeconfig_dir: Path | None, contexts: str | None, kubeconfig: Path | None, leader: str | None,
         stack: str, name: str, output: Path, force: bool) -> None:
    """Write a commented fleet.yaml from kubeconfigs.

    \b
    Examples:
      fleetplan init --kubeconfig-dir ~/.kube/fleet --leader north
      fleetplan init --contexts north,west,east --stack ocm -o ocm-fleet.yaml
    """
    import os

    from fleetplan.config.scaffolding import (
        clusters_from_contexts,
        clusters_from_dir,
        scaffold,
        write_scaffold,
    )

    if bool(kubeconfig_dir) == bool(contexts):
        raise ConfigError("say where the clusters are: --kubeconfig-dir DIR or --contexts a,b,c (one of them)",
                          hint="fleetplan init --help shows both")
    if kubeconfig_dir:
        clusters = clusters_from_dir(kubeconfig_dir)
    else:
        source = kubeconfig or Path(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
                                    or Path.home() / ".kube" / "config")
        clusters = clusters_from_contexts(source, [c.strip() for c in (contexts or "").split(",") if c.strip()])
    text = scaffold(name, stack, clusters, leader)
    write_scaffold(text, output, force=force)
    lead = leader or clusters[0].name
    echo(f"Wrote {output}: {stack} fleet with leader {lead} and {len(clusters) - 1} member(s).")
    echo(f"Next: fleetplan validate -f {output} && fleetplan plan -f {output}")
