"""The CI-sized benchmark runs end to end on the lab and produces sane figures.

Timing targets are the benchmark's business (benchmarks/run.py prints PASS/FAIL); this test only
checks that every figure was measured and is plausible, so a broken harness cannot pass silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_ci_sized_benchmark_produces_sane_figures(lab: Any, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    doc = tmp_path / "performance.md"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--ci", "--lab-dir", str(lab.dir), "--cpu-members", "100",
         "--startup-repeats", "1", "--json", str(out), "--doc", str(doc)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 1), f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    figures = json.loads(out.read_text())

    (scale,) = figures["scale"]
    assert scale["members"] == 10
    assert scale["objects"] == 2 + 8 * 10
    for key in ("cold_apply_s", "noop_plan_s", "baseline_apply_s", "baseline_diff_s", "cold_apply_cpu_s",
                "noop_plan_cpu_s"):
        assert 0 < scale[key] < 600, (key, scale[key])
    assert 20 < scale["cold_apply_rss_mib"] < 2000 and 20 < scale["noop_plan_rss_mib"] < 2000
    # Every member cluster was read (LISTs at least), and a converged fleet needs no writes.
    assert 1 <= scale["requests_per_member_mean"] <= scale["requests_per_member"] <= 50
    assert scale["requests_by_kind"].get("list", 0) >= 1
    assert scale["requests_by_kind"].get("write", 0) == 0
    assert scale["leader_requests"] >= 1

    cpu = figures["cpu"]
    assert cpu["members"] == 100 and cpu["resources"] == 2 + 8 * 100
    assert cpu["cold_steps"] == cpu["resources"] and cpu["converged_changes"] == 0
    assert min(cpu["graph_s"], cpu["cold_plan_s"], cpu["converged_plan_s"]) > 0

    assert {row["command"] for row in figures["startup"]} >= {"fleetplan --help"}
    assert len(figures["targets"]) == 6
    assert {t["verdict"] for t in figures["targets"]} <= {"PASS", "FAIL", "n/a"}
    assert "Reproduce with" in doc.read_text() and "verdict" in doc.read_text()
    assert "PASS" in done.stdout or "FAIL" in done.stdout
