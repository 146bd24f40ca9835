"""The command line: click commands, views, the single error boundary and exit codes.

Commands are registered by name and imported only when invoked, so `fleetplan --help` and
`fleetplan validate` do not pay for the Kubernetes client or the engine (start-up budget: 0.3 s).
Each command module owns one command or group; this module owns the boundary: a `FleetplanError`
becomes one line per diagnostic on stderr and its exit code; anything else is a bug, reported
with a traceback only under `--debug`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from fleetplan.errors import ExitCode, FleetplanError

# name -> (module, attribute, one-line help). Help text lives here so --help imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": ("fleetplan.cli.validating", "validate", "Check a fleet file and say exactly what is wrong."),
    "schema": ("fleetplan.cli.validating", "schema", "Print the JSON Schema of fleet.yaml."),
    "version": ("fleetplan.cli.validating", "version", "Print fleetplan's version."),
    "init": ("fleetplan.cli.initing", "init", "Write a commented fleet.yaml from kubeconfigs or contexts."),
    "lab": ("fleetplan.cli.labbing", "lab", "Run real local Kubernetes control planes (up|down|status|kubeconfig)."),
    "plan": ("fleetplan.cli.planning", "plan", "Show what apply would change (-out FILE saves it)."),
    "show": ("fleetplan.cli.planning", "show", "Show a saved plan, or the state."),
    "apply": ("fleetplan.cli.applying", "apply", "Converge the fleet, or apply exactly a saved plan."),
    "destroy": ("fleetplan.cli.applying", "destroy", "Delete everything this fleet created, in reverse order."),
    "state": ("fleetplan.cli.stating", "state", "Inspect or edit the state (list|show|rm)."),
    "force-unlock": ("fleetplan.cli.stating", "force_unlock", "Release a lock left by a run that is gone."),
    "graph": ("fleetplan.cli.graphing", "graph", "Print the dependency graph (dot|mermaid|svg|png)."),
    "controller": ("fleetplan.cli.controlling", "controller", "Reconcile Fleet resources in a management cluster."),
    "completion": ("fleetplan.cli.completing", "completion", "Print a shell completion script (bash|zsh|fish)."),
    "join-config": ("fleetplan.cli.joinconfig", "join_config", "Export a member's join file (Antrea, mode 0600)."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="FLEETPLAN_DEBUG", help="Show tracebacks for errors.")
@click.option("--no-color", is_flag=True, envvar="NO_COLOR", help="Never colour output.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, no_color: bool) -> None:
    """Plan, apply and destroy Kubernetes multi-cluster fleets from one fleet.yaml.

    \b
    Examples:
      fleetplan init --contexts north,west,east   # write fleet.yaml
      fleetplan validate
      fleetplan plan
      fleetplan apply
      fleetplan <command> --help                  # each command's own examples
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["color"] = (not no_color) and sys.stdout.isatty()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI inside the error boundary and exit with a documented code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or bool(os.environ.get("FLEETPLAN_DEBUG"))
    try:
        # Without standalone mode click returns (not raises) a command's click.exceptions.Exit code.
        code = cli.main(args=argv, prog_name="fleetplan", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except FleetplanError as err:
        if debug:
            import traceback

            traceback.print_exc()
        for diag in err.diagnostics:
            click.echo(diag.render(), err=True)
        sys.exit(int(err.exit_code))
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.ClickException as err:
        err.show()
        sys.exit(int(ExitCode.ERROR) if err.exit_code == 2 else err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except Exception as err:  # a bug: say so plainly
        if debug:
            raise
        click.echo(f"fleetplan: internal error: {type(err).__name__}: {err} (hint: rerun with --debug "
                   "for a traceback and report it)", err=True)
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(0)


def echo(message: str = "", *, err: bool = False, **style: Any) -> None:
    """Print a line, styled only when colour is on for this run."""
    ctx = click.get_current_context(silent=True)
    color = bool(ctx and ctx.find_root().obj and ctx.find_root().obj.get("color"))
    click.echo(click.style(message, **style) if (color and style) else message, err=err)
