"""Mutations of the shipped examples never produce a traceback.

Each example is copied (with its kubeconfigs and join file) into a temporary tree; hypothesis
then mutates it, structurally (drop, replace or rename a key, retype a value, empty a list) or
textually (insert, delete or replace characters), and runs `fleetplan validate` in-process. The
outcome must be exit 0 or 1, never the internal-error exit, and stderr must be one diagnostic
per line: `file[:line[:col]]: error|warning: ...`.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from fleetplan.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FLEETS = ["antrea/fleet.yaml", "ocm/fleet.yaml", "split/leader/fleet.yaml", "split/member-east/fleet.yaml"]
LINE = re.compile(r"^[^\n]+?(:\d+(:\d+)?)?: (error|warning): \S")
MAX_EXAMPLES = 400 if os.environ.get("FLEETPLAN_FULL") else 60

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["", "v2.7.0", "24h", "0s", "~", "${HOME}", "leader", "members", "all", "north", "-x"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(EXAMPLES, Path(tmp) / "examples")
        yield Path(tmp) / "examples"


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(doc: Any, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = data.draw(st.sampled_from(["drop", "replace", "rename", "empty"]))
    if action == "drop":
        del parent[last]
    elif action == "replace":
        parent[last] = data.draw(values)
    elif action == "rename" and isinstance(parent, dict):
        parent[data.draw(st.text(min_size=1, max_size=10))] = parent.pop(last)
    else:
        parent[last] = [] if isinstance(parent[last], list) else {}


def _run(path: Path, offline: bool) -> tuple[object, str]:
    err = io.StringIO()
    code: object = 0
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            main(["validate", "-f", str(path), *(["--offline"] if offline else [])])
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def _assert_clean(code: object, err: str) -> None:
    assert code in (0, 1), err
    assert "Traceback" not in err and "internal error" not in err, err
    for line in err.splitlines():
        assert LINE.match(line), line


@settings(
    max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), example=st.sampled_from(FLEETS), rounds=st.integers(1, 3), offline=st.booleans())
def test_structural_mutations_never_crash(
    tree: Path, data: st.DataObject, example: str, rounds: int, offline: bool
) -> None:
    yaml = YAML()
    source = tree / example
    doc = yaml.load(source.read_text())
    for _ in range(rounds):
        if not _paths(doc)[1:]:
            break
        _mutate(doc, data)
    target = source.with_name("mutated.yaml")
    with target.open("w") as handle:
        yaml.dump(doc, handle)
    _assert_clean(*_run(target, offline))


@settings(
    max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), example=st.sampled_from(FLEETS), offline=st.booleans())
def test_text_mutations_never_crash(tree: Path, data: st.DataObject, example: str, offline: bool) -> None:
    text = (tree / example).read_bytes()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        junk = data.draw(
            st.binary(max_size=4)
            | st.sampled_from([b"\t", b":", b"- ", b"&a", b"*a", b"<<: ", b"\n---\n", b"{", b"'", b"!x "])
        )
        cut = data.draw(st.integers(0, 3))
        text = text[:at] + junk + text[at + cut :]
    target = (tree / example).with_name("mutated.yaml")
    target.write_bytes(text)
    _assert_clean(*_run(target, offline))
