"""Every command's --help shows examples of itself; shell completion scripts and completions work."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from fleetplan.cli import COMMANDS, cli


def _all_commands() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    ctx = click.Context(cli)
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        assert command is not None
        paths.append((name,))
        if isinstance(command, click.Group):
            paths.extend((name, sub) for sub in command.list_commands(ctx))
    return paths


@pytest.mark.parametrize("path", _all_commands(), ids=" ".join)
def test_every_command_help_has_examples_of_itself(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="fleetplan")
    assert result.exit_code == 0, result.output
    examples = result.output.split("Examples:\n", 1)
    assert len(examples) == 2, f"fleetplan {' '.join(path)} --help has no Examples section"
    lines = [line.strip() for line in examples[1].split("\n\n")[0].splitlines()]
    assert lines and all(line for line in lines)
    assert any(" ".join(path) in line for line in lines), lines


def test_top_level_help_has_examples() -> None:
    result = CliRunner().invoke(cli, ["--help"], prog_name="fleetplan")
    assert "Examples:\n    fleetplan init --contexts" in result.output


def _fleetplan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetplan", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_command_prints_clicks_script(shell: str) -> None:
    done = _fleetplan("completion", shell)
    assert done.returncode == 0, done.stderr
    assert "_FLEETPLAN_COMPLETE" in done.stdout
    same = _fleetplan(env={"_FLEETPLAN_COMPLETE": f"{shell}_source"})
    assert same.stdout.strip() == done.stdout.strip()


def test_bash_completes_commands_and_choices() -> None:
    words = _fleetplan(env={"_FLEETPLAN_COMPLETE": "bash_complete", "COMP_WORDS": "fleetplan gr", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["plain,graph"]
    formats = _fleetplan(env={"_FLEETPLAN_COMPLETE": "bash_complete",
                              "COMP_WORDS": "fleetplan graph --format ", "COMP_CWORD": "3"})
    assert formats.stdout.split() == ["plain,dot", "plain,mermaid", "plain,svg", "plain,png"]


def test_unknown_shell_is_a_usage_error() -> None:
    done = _fleetplan("completion", "tcsh")
    assert done.returncode == 1
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in done.stderr
