"""`fleetplan graph --format svg|png`: drawn by Graphviz when `dot` is on PATH, a clear error naming
the package when it is not. PATH is controlled per test; the real Graphviz is used when installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FLEET = """\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata: {name: pictures}
spec:
  stack: none
  leader: {name: north}
  members: [{name: west}]
  resources:
    - {clusters: all, path: ./extras/}
"""
MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: apps}
data: {color: blue}
"""


@pytest.fixture()
def fleet_dir(tmp_path: Path) -> Path:
    (tmp_path / "extras").mkdir()
    (tmp_path / "extras" / "app.yaml").write_text(MANIFESTS)
    (tmp_path / "fleet.yaml").write_text(FLEET)
    return tmp_path


def _graph(cwd: Path, path_dirs: list[Path], *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PATH": os.pathsep.join(str(p) for p in path_dirs)}
    return subprocess.run([sys.executable, "-m", "fleetplan", "graph", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=60)


def test_without_graphviz_svg_fails_naming_the_package(fleet_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = _graph(fleet_dir, [empty], "--format", "svg", "-o", "out.svg")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "need Graphviz's `dot` program, which is not on PATH" in err
    assert "apt-get install graphviz" in err and "fleetplan graph --format dot" in err
    assert "Traceback" not in err and not (fleet_dir / "out.svg").exists()


def test_text_formats_need_no_graphviz(fleet_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = _graph(fleet_dir, [empty])
    assert done.returncode == 0, done.stderr
    assert b'"north/core/Namespace/-/apps" -> "north/core/ConfigMap/apps/settings"' in done.stdout
    mermaid = _graph(fleet_dir, [empty], "--format", "mermaid")
    assert mermaid.stdout.startswith(b"flowchart") or mermaid.stdout.startswith(b"graph")


def test_svg_is_drawn_by_dot_from_the_dot_source(fleet_dir: Path, tmp_path: Path) -> None:
    """A stand-in `dot` records its arguments and input, so the hand-off itself is checked."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    log = tmp_path / "dot-input"
    # Shell builtins only: PATH holds nothing else.
    (fake / "dot").write_text(f'#!/bin/sh\necho "$@" > {log}.args\n'
                              f'while IFS= read -r line; do echo "$line"; done > {log}\nprintf "<svg>drawn</svg>"\n')
    (fake / "dot").chmod(0o755)
    done = _graph(fleet_dir, [fake], "--format", "svg", "-o", "fleet.svg")
    assert done.returncode == 0, done.stderr
    assert (fleet_dir / "fleet.svg").read_text() == "<svg>drawn</svg>"
    assert Path(f"{log}.args").read_text().strip() == "-Tsvg"
    assert log.read_text().startswith("digraph fleet {")


def test_a_failing_dot_is_reported_in_one_line(fleet_dir: Path, tmp_path: Path) -> None:
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "dot").write_text('#!/bin/sh\necho "Error: syntax error in line 1" >&2\nexit 1\n')
    (fake / "dot").chmod(0o755)
    done = _graph(fleet_dir, [fake], "--format", "png", "-o", "fleet.png")
    assert done.returncode == 1
    assert "Graphviz `dot -Tpng` failed: Error: syntax error in line 1" in done.stderr.decode()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (CI stays lean)")
def test_real_graphviz_draws_svg_and_png(fleet_dir: Path) -> None:
    bin_dir = Path(str(shutil.which("dot"))).parent
    svg = _graph(fleet_dir, [bin_dir], "--format", "svg")
    assert svg.returncode == 0, svg.stderr
    assert b"<svg" in svg.stdout and b"north/core/ConfigMap/apps/settings" in svg.stdout
    png = _graph(fleet_dir, [bin_dir], "--format", "png", "-o", "fleet.png")
    assert png.returncode == 0, png.stderr
    assert (fleet_dir / "fleet.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
