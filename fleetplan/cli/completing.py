"""`fleetplan completion bash|zsh|fish`: print the shell's completion script.

Completion itself is click's: the script calls fleetplan back with `_FLEETPLAN_COMPLETE` set, and
the lazy command registry imports only the command being completed, so a <TAB> stays fast. The
same script comes from `_FLEETPLAN_COMPLETE=bash_source fleetplan`; this command saves looking up
the variable's name.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

COMPLETE_VAR = "_FLEETPLAN_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    Examples:
      eval "$(fleetplan completion bash)"        # in ~/.bashrc
      eval "$(fleetplan completion zsh)"         # in ~/.zshrc
      fleetplan completion fish > ~/.config/fish/completions/fleetplan.fish
    """
    from fleetplan.cli import cli

    completer = get_completion_class(shell)
    if completer is None:  # click ships all three; guard against a trimmed install
        raise click.UsageError(f"no completion support for {shell}")
    click.echo(completer(cli, {}, "fleetplan", COMPLETE_VAR).source())
