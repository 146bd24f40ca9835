"""`fleetplan validate`, `fleetplan schema` and `fleetplan version`.

These are the commands that must start fast (budget 0.3 s wall, see benchmarks/startup.py), so
the config package (pydantic, ruamel.yaml) is imported inside the command bodies, never at module
import: `fleetplan validate --help` costs only click.

`validate` prints one line per problem (`file:line:col: error: field.path: what (hint: ...)`) on
stderr and exits 1 when there is an error; warnings alone exit 0. With `--json` it prints one
object on stdout instead, in the documented format below, and exits the same way:

    {"formatVersion": 1, "file": "...", "valid": true|false,
     "fleet": {"name", "stack", "version", "clusters": [{"name", "role"}]} | null,
     "diagnostics": [{"severity", "summary", "file", "line", "column", "path", "address", "hint"}]}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fleetplan import __version__
from fleetplan.errors import ConfigError, Diagnostic, ExitCode

VALIDATE_FORMAT_VERSION = 1


def _fleet_summary(fleet: object) -> dict[str, object]:
    from fleetplan.config import Fleet

    assert isinstance(fleet, Fleet)
    roles = [{"name": fleet.leader_name, "role": "leader"}]
    roles += [{"name": m.name, "role": "member"} for m in fleet.spec.members]
    return {"name": fleet.name, "stack": fleet.spec.stack, "version": fleet.spec.version,
            "memberOnly": fleet.is_member_only, "clusters": roles}


@click.command()
@click.option("-f", "--file", "file", default="fleet.yaml", show_default=True,
              type=click.Path(dir_okay=True, path_type=Path), help="The fleet file to check.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (formatVersion 1) on stdout.")
@click.option("--offline", is_flag=True, help="Skip checks that read kubeconfig files and contexts.")
def validate(file: Path, as_json: bool, offline: bool) -> None:
    """Check a fleet file and say exactly what is wrong, with file:line:column and a hint.

    \b
    Examples:
      fleetplan validate
      fleetplan validate -f fleets/prod.yaml --offline
      fleetplan validate --json | jq .errors
    """
    from fleetplan.config import check_fleet_file

    fleet: object = None
    try:
        checked = check_fleet_file(file, offline=offline)
        diagnostics: tuple[Diagnostic, ...] = checked.diagnostics
        fleet, valid = checked.fleet, checked.ok
    except ConfigError as err:
        diagnostics, valid = err.diagnostics, False
    if as_json:
        payload = {"formatVersion": VALIDATE_FORMAT_VERSION, "file": str(file), "valid": valid,
                   "fleet": _fleet_summary(fleet) if fleet is not None and valid else None,
                   "diagnostics": [d.as_dict() for d in diagnostics]}
        click.echo(json.dumps(payload, indent=2))
        if not valid:
            raise click.exceptions.Exit(int(ExitCode.ERROR))
        return
    if not valid:
        raise ConfigError(diagnostics)
    for diag in diagnostics:  # warnings only
        click.echo(diag.render(), err=True)
    summary = _fleet_summary(fleet)
    members = len(summary["clusters"]) - 1  # type: ignore[arg-type]
    if summary["memberOnly"]:
        shape = f"member-only, {members} member(s)"
    else:
        shape = f"1 leader, {members} member(s)" if members else "leader-only"
    checked_what = "offline checks" if offline else "all checks"
    stack = f"{summary['stack']} {summary['version']}" if summary["version"] else "no stack, resources only"
    click.echo(f"{file}: valid ({stack}, {shape}; {checked_what} passed)")


@click.command()
def schema() -> None:
    """Print the JSON Schema of fleet.yaml (the same as schemas/fleet.schema.json).

    \b
    Examples:
      fleetplan schema > fleet.schema.json
    """
    from fleetplan.config.schema import render_schema

    sys.stdout.write(render_schema())


@click.command()
def version() -> None:
    """Print fleetplan's version and the fleet.yaml apiVersion it reads.

    \b
    Examples:
      fleetplan version
    """
    click.echo(f"fleetplan {__version__} (fleet.yaml fleetplan.dev/v1alpha1, Python "
               f"{sys.version_info.major}.{sys.version_info.minor})")
