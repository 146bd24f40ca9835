"""`fleetplan validate`, `schema` and `version` through the CLI boundary, in-process."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from fleetplan.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ["antrea/fleet.yaml", "ocm/fleet.yaml", "split/leader/fleet.yaml", "split/member-east/fleet.yaml"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_is_valid_online(example: str) -> None:
    path = ROOT / "examples" / example
    code, out, err = run("validate", "-f", str(path))
    assert (code, err) == (0, "")
    assert out.startswith(f"{path}: valid (") and out.endswith("; all checks passed)\n")


def test_examples_carry_the_schema_comment() -> None:
    for example in EXAMPLES:
        first = (ROOT / "examples" / example).read_text().splitlines()[0]
        depth = example.count("/") + 1  # examples/<dirs>/fleet.yaml up to the repository root
        assert first == f"# yaml-language-server: $schema={'../' * depth}schemas/fleet.schema.json"
        target = (ROOT / "examples" / example).parent / first.split("=", 1)[1]
        assert target.resolve() == ROOT / "schemas" / "fleet.schema.json"


def test_json_output_for_a_valid_fleet() -> None:
    code, out, _ = run("validate", "-f", str(ROOT / "examples/antrea/fleet.yaml"), "--json")
    payload = json.loads(out)
    assert code == 0
    assert payload["formatVersion"] == 1 and payload["valid"] is True and payload["diagnostics"] == []
    assert payload["fleet"]["clusters"] == [
        {"name": "north", "role": "leader"},
        {"name": "west", "role": "member"},
        {"name": "east", "role": "member"},
    ]


def test_json_output_for_an_invalid_fleet_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text(
        "apiVersion: fleetplan.dev/v1alpha1\nkind: Fleet\nmetadata: {name: x}\nspec: {stak: ocm}\n"
    )
    code, out, err = run("validate", "-f", str(bad), "--json")
    payload = json.loads(out)
    assert (code, err, payload["valid"], payload["fleet"]) == (1, "", False, None)
    unknown = [d for d in payload["diagnostics"] if d["path"] == "spec.stak"]
    assert unknown == [
        {
            "severity": "error",
            "summary": "unknown field 'stak'",
            "file": str(bad),
            "line": 4,
            "column": 8,
            "path": "spec.stak",
            "address": None,
            "hint": "did you mean 'stack'?",
        }
    ]


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples/antrea", tmp_path / "antrea")
    path = tmp_path / "antrea/fleet.yaml"
    path.write_text(path.read_text().replace("strategy: per-member", "strategy: shared"))
    code, out, err = run("validate", "-f", str(path))
    assert code == 0
    assert err == (
        f"{path}:28:15: warning: spec.tokens.strategy: shared tokens let any member act as another "
        "(ClusterID spoofing) (hint: use strategy: per-member unless you must)\n"
    )
    assert "valid" in out


def test_schema_command_prints_the_checked_in_schema() -> None:
    code, out, _ = run("schema")
    assert code == 0
    assert out == (ROOT / "schemas/fleet.schema.json").read_text()


def test_version_command() -> None:
    code, out, _ = run("version")
    assert (code, out) == (
        0,
        "fleetplan 0.1.0 (fleet.yaml fleetplan.dev/v1alpha1, Python "
        f"{sys.version_info.major}.{sys.version_info.minor})\n",
    )


@pytest.mark.parametrize("argv", [["--help"], ["validate", "--help"]])
def test_help_does_not_import_the_config_stack(argv: list[str]) -> None:
    probe = (
        "import sys\nfrom fleetplan.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
        "    pass\nprint(sorted(m for m in ('pydantic', 'ruamel.yaml', 'kubernetes') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.splitlines()[-1] == "[]"
