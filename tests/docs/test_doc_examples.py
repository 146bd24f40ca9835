"""Every command example in README.md and docs/*.md runs, so the docs cannot drift from the tool.

The convention (docs/index.md says it for writers):

- A fenced block tagged `sh` is executed. A document's `sh` blocks run in order as one bash script
  (`set -euo pipefail`) in a scratch directory holding a copy of `examples/` and `docs/examples/`,
  with `fleetplan` on PATH (this checkout) and `$FLEETPLAN_MIRROR` set, so a tutorial can build on
  its earlier steps.
- `<!-- needs: lab -->` on the line before a block: the document runs in the integration suite
  against the session lab (tests/conftest.py `lab`, `$FLEETPLAN_LAB_DIR` set). There the lab stands
  in for `fleetplan lab up` and `fleetplan lab down`, which tests/integration/lab/test_lab_cli.py
  runs for real; every other line runs as written.
- `<!-- needs: graphviz -->`: the block is skipped when Graphviz's `dot` is not installed.
- `<!-- covered-by: PATH::TEST -->`: the block is run by that test instead (commands that cannot run
  inside a doc test, such as `make demo`); PATH must hold a test function TEST (`Class::test` for a
  method), found by parsing the file, so a renamed or deleted test breaks the doc, not the cover.
- `<!-- covered-by: .ci/run -->` is the one cover without a test: `make test` is the suite itself.
  It may only cover lines that are steps of CI's own run (CI_STEPS below: `make test`, its set-up,
  or pytest over paths of the suite), each checked against .ci/run and the Makefile.
- Any other fenced block (`console`, `text`, `yaml`, ...) is output or a file, and must not hold
  a command line (`fleetplan ...` or `$ fleetplan ...`): examples cannot hide from this test.
- docs/troubleshooting.md's headings quote error messages; each literal part of a message must
  occur in fleetplan's source, so the index only lists messages the code really prints.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kit import fleets

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
MIRROR = str(fleets.MIRROR)
COMMAND_LINE = re.compile(r"^\s*(\$\s+)?fleetplan\s+[a-z-]+")
LAB_STAND_INS = {re.compile(r"^\s*fleetplan lab up\b.*$", re.M): "fleetplan lab status >/dev/null",
                 re.compile(r"^\s*fleetplan lab down\b.*$", re.M): ":"}


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    info: str
    text: str
    marks: tuple[str, ...]  # "needs: lab", "covered-by: ...", ...

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    def mark(self, key: str) -> str | None:
        return next((m.split(":", 1)[1].strip() for m in self.marks if m.split(":", 1)[0] == key), None)


def blocks_of(doc: Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(```+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        start, info = i, fence.group(2)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))), len(lines))
        marks = []
        j = start - 1
        while j >= 0 and re.match(r"^<!--\s*(.+?)\s*-->$", lines[j]):
            marks.append(re.match(r"^<!--\s*(.+?)\s*-->$", lines[j]).group(1))  # type: ignore[union-attr]
            j -= 1
        found.append(Block(doc, start + 1, info, "\n".join(lines[start + 1:end]), tuple(marks)))
        i = end + 1
    return found


def executed(doc: Path) -> list[Block]:
    return [b for b in blocks_of(doc) if b.info == "sh" and b.mark("covered-by") is None]


def needs_lab(doc: Path) -> bool:
    return any(b.mark("needs") == "lab" for b in executed(doc))


def collected_tests(path: Path) -> set[str]:
    """The tests pytest would collect by name in `path`: `test_x` and `TestY::test_x`."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"))
    return found


def _text(path: str) -> str:
    return (ROOT / path).read_text()


def _test_recipe() -> str:
    match = re.search(r"^test:(.*)\n((?:\t.*\n)+)", _text("Makefile"), re.M)
    assert match, "the Makefile has no test target"
    return match.group(1) + "\n" + match.group(2)


def _pytest_paths_exist(line: str) -> bool:
    paths = [a for a in line.split("-m pytest", 1)[1].split() if not a.startswith("-")]
    return bool(paths) and all(p.startswith("tests/") and (ROOT / p).exists() for p in paths)


# The lines `.ci/run` may cover, each with the evidence that CI's run really does it.
CI_STEPS: list[tuple[re.Pattern[str], str, Any]] = [
    (re.compile(r"make test"), ".ci/run runs `make test` verbatim",
     lambda line: "make test" in _text(".ci/run").splitlines()),
    (re.compile(r"make lab-bins"), "the Makefile's test target depends on lab-bins",
     lambda line: re.search(r"\blab-bins\b", _test_recipe().splitlines()[0]) is not None),
    (re.compile(r"python3 -m pip install -e \."), "`make test` installs this checkout editable (deps)",
     lambda line: "deps" in _test_recipe().splitlines()[0] and "pip install -q -e '.[test]'" in _text("Makefile")),
    (re.compile(r'export FLEETPLAN_LAB_BIN="?\$\(bash lab/build\.sh --print\)"?'),
     "the test recipe sets FLEETPLAN_LAB_BIN the same way",
     lambda line: "FLEETPLAN_LAB_BIN=$$(bash lab/build.sh --print)" in _test_recipe()),
    (re.compile(r"(\w+=\S+\s+)*python3 -m pytest( \S+)+"), "`make test` runs all of tests/, these paths exist",
     _pytest_paths_exist),
]


def cover_problems(block: Block, covered: str) -> list[str]:
    """Why `covered-by: covered` does not really run `block` (empty when it does)."""
    if covered == ".ci/run":
        problems = []
        for raw in block.text.splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            step = next(((why, check) for pattern, why, check in CI_STEPS if pattern.fullmatch(line)), None)
            if step is None:
                problems.append(f"{line!r} is not a step of CI's run; name the test that runs it (PATH::TEST)")
            elif not step[1](line):
                problems.append(f"{line!r}: not true any more that {step[0]}")
        return problems
    path, sep, test = covered.partition("::")
    if not sep or not test:
        return [f"covered-by {covered!r} names no test: write PATH::TEST"]
    if not (ROOT / path).is_file():
        return [f"covered-by names a missing file {path}"]
    if test not in collected_tests(ROOT / path):
        return [f"covered-by names {test}, which is not a test function in {path}"]
    return []


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_commands_appear_only_in_blocks_that_run(doc: Path) -> None:
    for block in blocks_of(doc):
        if block.info == "sh":
            covered = block.mark("covered-by")
            if covered:
                problems = cover_problems(block, covered)
                assert not problems, f"{block.where}: " + "; ".join(problems)
            continue
        stray = [line for line in block.text.splitlines() if COMMAND_LINE.match(line)]
        assert not stray, f"{block.where}: command example outside a ```sh block: {stray[0]!r}"


def test_covered_by_refuses_a_file_without_a_test_and_a_missing_test(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    this = "tests/docs/test_doc_examples.py"
    marks = [this, f"{this}::no_such_test", f"{this}::test_readme_demo_runs", "nope/missing.py::test_x",
             ".ci/run", ".ci/run"]
    bodies = ["fleetplan plan", "fleetplan plan", "make demo", "make demo", "make test  # the suite",
              "rm -rf /tmp/whatever"]
    doc.write_text("".join(f"<!-- covered-by: {m} -->\n```sh\n{b}\n```\n\n" for m, b in zip(marks, bodies,
                                                                                            strict=True)))
    found = [cover_problems(b, b.mark("covered-by") or "") for b in blocks_of(doc)]
    assert ["names no test" in p[0] for p in found[:1]] == [True]
    assert "not a test function" in found[1][0]
    assert found[2] == [] and "missing file" in found[3][0] and found[4] == []
    assert "not a step of CI's run" in found[5][0]
    assert {"test_readme_demo_runs", "test_covered_by_refuses_a_file_without_a_test_and_a_missing_test"} <= \
        collected_tests(ROOT / this)


def _workspace(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    shutil.copytree(ROOT / "docs" / "examples", work / "docs" / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "fleetplan"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fleetplan "$@"\n')
    shim.chmod(0o755)
    env = fleets.cli_env({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FLEETPLAN_MIRROR": MIRROR,
                          "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "HOME": str(tmp_path / "home")})
    (tmp_path / "home").mkdir()
    return work, env


def run_document(doc: Path, tmp_path: Path, extra_env: dict[str, str] | None = None,
                 stand_ins: dict[Any, str] | None = None) -> str:
    work, env = _workspace(tmp_path)
    env.update(extra_env or {})
    parts = ["set -euo pipefail"]
    for block in executed(doc):
        if block.mark("needs") == "graphviz" and shutil.which("dot") is None:
            continue
        text = block.text
        for pattern, replacement in (stand_ins or {}).items():
            text = pattern.sub(replacement, text)
        parts.append(f"echo '### block at {block.where}' >&2\n{text}")
    done = subprocess.run(["bash", "-c", "\n".join(parts)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, (f"{doc.name}: exit {done.returncode}; the last block started is the last "
                                  f"'### block at' line\n--- stdout\n{done.stdout[-6000:]}\n--- stderr\n"
                                  f"{done.stderr[-6000:]}")
    return done.stdout


OFFLINE = [d for d in DOCS if executed(d) and not needs_lab(d)]
ON_LAB = [d for d in DOCS if needs_lab(d)]


@pytest.mark.parametrize("doc", OFFLINE, ids=lambda d: str(d.relative_to(ROOT)))
def test_offline_examples_run(doc: Path, tmp_path: Path) -> None:
    run_document(doc, tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("doc", ON_LAB, ids=lambda d: str(d.relative_to(ROOT)))
def test_lab_examples_run(doc: Path, tmp_path: Path, lab: Any) -> None:
    run_document(doc, tmp_path, {"FLEETPLAN_LAB_DIR": str(lab.dir)}, LAB_STAND_INS)


def test_troubleshooting_quotes_messages_the_code_prints() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "fleetplan").rglob("*.py"))
    flat = re.sub(r'"\s*\n\s*f?"', "", source)  # join implicitly concatenated string literals
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    headings = [m.group(2) for m in re.finditer(r"^### (`+) ?(.+?) ?\1$", text, re.M)]
    assert len(headings) >= 15
    for message in headings:
        for literal in re.split(r"<[A-Z_]+>", message):
            literal = literal.strip()
            if len(literal) >= 6:
                assert literal in flat, f"troubleshooting.md quotes {literal!r}, which fleetplan never prints"


def test_every_doc_is_linked_from_the_index() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    for doc in (ROOT / "docs").glob("*.md"):
        if doc.name != "index.md":
            assert f"({doc.name})" in index, f"docs/index.md does not link {doc.name}"
    assert "(docs/index.md)" in (ROOT / "README.md").read_text()


def test_ci_workflow_example_plans_on_pull_requests_and_applies_on_merge() -> None:
    from ruamel.yaml import YAML

    workflow = YAML(typ="safe").load((ROOT / "docs" / "examples" / "github-actions" / "fleetplan.yml").read_text())
    events = workflow["on"]
    assert "pull_request" in events and events["push"]["branches"] == ["main"]
    plan_steps = " ".join(str(s.get("run", "")) + str(s.get("uses", "")) for s in workflow["jobs"]["plan"]["steps"])
    assert "fleetplan plan -out fleet.plan --detailed-exitcode" in plan_steps
    assert "actions/upload-artifact" in plan_steps
    apply_job = workflow["jobs"]["apply"]
    assert "push" in apply_job["if"]
    assert "fleetplan apply" in " ".join(str(s.get("run", "")) for s in apply_job["steps"])


@pytest.mark.integration
def test_readme_demo_runs(lab_bin: Path, tmp_path: Path) -> None:
    """The README's main job (`make demo` runs exactly this module) on a lab of its own."""
    env = fleets.cli_env({"FLEETPLAN_LAB_BIN": str(lab_bin), "FLEETPLAN_MIRROR": MIRROR, "NO_COLOR": "1",
                          "PYTHONPATH": str(ROOT)})
    env.pop("FLEETPLAN_LAB_DIR", None)
    done = subprocess.run([sys.executable, "-m", "fleetplan.lab.demo", "--dir", str(tmp_path / "lab"), "--down"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
    assert "No changes." in done.stdout
    assert "$(PY) -m fleetplan.lab.demo" in (ROOT / "Makefile").read_text()  # what `make demo` runs
