"""Crash and resume: SIGKILL a real `fleetplan apply` / `destroy` subprocess, then run it again.

Kill points are of two kinds:
- exact step boundaries through the engine's test kill switch (`FLEETPLAN_TEST_KILL_AT`):
  `start:n` (intent journaled, side effect not done), `unrecorded:n` (side effect done, state not
  yet updated), `finish:n` (state updated);
- random instants: SIGKILL from outside after a random delay, wherever the process is (loading,
  planning, inside a step's HTTP call or readiness wait, writing the state).

After every kill the next run must converge: exit 0, the owned objects on the clusters exactly the
clean-apply set (no duplicates, no orphans), the state recording exactly those with their live
uids, no journal, no lock left, and a plan with no changes. Destroy likewise must leave nothing.

CI runs a spread of points; FLEETPLAN_FULL=1 runs every step boundary of both operations.
Stacks covered: `resources` (3 clusters, 18 objects), and the Antrea (leader + 2 members) and OCM
(hub + 2 spokes) fleets of the session, with their controller/agent simulations running.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fleetkit import FULL, ResourcesFleet, assert_clean_end_state, assert_stack_end_state, cli_env, record

pytestmark = pytest.mark.integration
STEPS = 18
POINTS = ("start", "unrecorded", "finish")


def _exact_trials() -> list[tuple[str, str]]:
    if FULL:
        every = [f"{p}:{n}" for n in range(1, STEPS + 1) for p in POINTS]
        # destroy points run in a shifted order so each apply point meets a different destroy point
        return list(zip(every, every[7:] + every[:7], strict=True))
    return [("start:1", "unrecorded:6"), ("unrecorded:7", "finish:18"), ("finish:12", "start:3"),
            ("unrecorded:18", "unrecorded:11")]


def _killed_at(fleet: ResourcesFleet, operation: str, point: str) -> None:
    done = fleet.run(operation, "--auto-approve", check=None, env={"FLEETPLAN_TEST_KILL_AT": point})
    assert done.returncode == -signal.SIGKILL, (
        f"{operation} with kill point {point} was not killed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")


def _killed_randomly(argv: list[str], cwd: Path, rng: random.Random, log: Path,
                     longest: float = 2.5) -> dict[str, Any]:
    """SIGKILL at a random instant (up to `longest` s) after the first step started, so inside the
    walk: an HTTP call, a readiness wait or a state write; returns where it happened."""
    delay = rng.uniform(0.0, longest)
    with log.open("w") as out:
        process = subprocess.Popen(argv, cwd=cwd, env=cli_env(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while process.poll() is None and '"step_start"' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    steps = sum(e.get("type") == "step_complete" for e in events)
    started = sum(e.get("type") == "step_start" for e in events)
    return {"delay": round(delay, 2), "killed": process.returncode == -signal.SIGKILL,
            "steps_done": steps, "steps_started": started}


@pytest.mark.parametrize("apply_point,destroy_point", _exact_trials())
def test_kill_apply_and_destroy_then_resume(tmp_path: Path, lab: Any, apply_point: str,
                                            destroy_point: str) -> None:
    rng = random.Random(f"{apply_point}/{destroy_point}")
    fleet = ResourcesFleet(tmp_path, lab, prefix="k")
    try:
        for operation, point in (("apply", apply_point), ("destroy", destroy_point)):
            if operation == "destroy":
                assert_clean_end_state(fleet)
            _killed_at(fleet, operation, point)
            rows = [record("crash", stack="resources", operation=operation, point=f"step {point}", survived=None)]
            again = fleet.run(operation, "--auto-approve", check=None,
                              env={"FLEETPLAN_TEST_KILL_AT": SECOND[point.split(":")[0]]})
            rows.append(_second_row("resources", operation, point, again))
            where = _killed_randomly(fleet.command(operation, "--auto-approve", "--json"), fleet.root, rng,
                                     tmp_path / f"{operation}-random.log")
            fleet.run(operation, "--auto-approve")  # exit 0 is checked
            if operation == "apply":
                assert_clean_end_state(fleet)
            else:
                assert_clean_end_state(fleet, destroyed=True)
            # The run right after the first kill found its lock (same host, pid gone) and said so.
            assert "took over the lock" in again.stderr, again.stderr[-1000:]
            for row in rows:
                row["survived"] = True if row["survived"] is None else row["survived"]
            record("crash", stack="resources", operation=operation, point=_random_point(where),
                   survived=True if where["killed"] else "n/a")
    finally:
        fleet.run("destroy", "--auto-approve", check=None)


# After a kill at one kind of point, the resuming run is killed again early at another kind: a crash
# during recovery, with the first run's journal and lock still in place.
SECOND = {"start": "unrecorded:2", "unrecorded": "finish:1", "finish": "start:2"}


def _second_row(stack: str, operation: str, first: str, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    point = f"step {SECOND[first.split(':')[0]]} of the resuming run"
    if done.returncode == 0:  # the first kill left fewer steps than the second point needs
        return record("crash", stack=stack, operation=operation, point=f"{point}: finished first", survived="n/a")
    assert done.returncode == -signal.SIGKILL, f"{operation} resume: exit {done.returncode}\n{done.stderr[-2000:]}"
    return record("crash", stack=stack, operation=operation, point=point, survived=None)


def _random_point(where: dict[str, Any]) -> str:
    if not where["killed"]:
        return f"random, {where['delay']}s into the walk: finished first"
    return (f"random, {where['delay']}s into the walk ({where['steps_done']} steps done, "
            f"{where['steps_started']} started)")


def _stack_trials() -> list[tuple[str, str, str]]:
    """(stack, destroy point kind, apply point kind); the step number is drawn from the plan."""
    if FULL:
        return [(stack, d, a) for stack in ("antrea", "ocm") for d, a in zip(POINTS, POINTS[1:] + POINTS[:1],
                                                                             strict=True)]
    return [("antrea", "unrecorded", "start"), ("ocm", "finish", "unrecorded")]


@pytest.mark.parametrize("stack,destroy_kind,apply_kind", _stack_trials())
def test_stack_fleet_killed_and_resumed(request: pytest.FixtureRequest, tmp_path: Path, stack: str,
                                        destroy_kind: str, apply_kind: str) -> None:
    env = request.getfixturevalue(f"{stack}_fleet")
    fleet_file = Path(env.fleet_file)
    doc = json.loads(fleet_file.read_text())
    state_path, fleet_name = Path(doc["spec"]["state"]["path"]), doc["metadata"]["name"]
    clusters = list(env.lab.clusters[:3]) if hasattr(env, "lab") else [env.hub, *env.spokes]
    rng = random.Random(f"{stack}/{destroy_kind}/{apply_kind}")

    def run(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(_argv(*args, fleet=fleet_file), cwd=fleet_file.parent, env=cli_env(extra),
                              capture_output=True, text=True, timeout=600)

    run("apply", "--auto-approve")  # the session's fleet, converged, is where each trial starts
    for operation, kind in (("destroy", destroy_kind), ("apply", apply_kind)):
        planned = json.loads(run("plan", *(["--destroy"] if operation == "destroy" else []), "--json").stdout)
        steps = sum(planned["summary"].values())
        point = f"{kind}:{rng.randint(1, max(1, steps))}"
        killed = run(operation, "--auto-approve", extra={"FLEETPLAN_TEST_KILL_AT": point})
        assert killed.returncode == -signal.SIGKILL, f"{operation} at {point}: exit {killed.returncode}\n" \
                                                     f"{killed.stdout[-2000:]}\n{killed.stderr[-2000:]}"
        rows = [record("crash", stack=stack, operation=operation, point=f"step {point} of {steps}", survived=None)]
        again = run(operation, "--auto-approve", extra={"FLEETPLAN_TEST_KILL_AT": SECOND[kind]})
        rows.append(_second_row(stack, operation, point, again))
        where = _killed_randomly(_argv(operation, "--auto-approve", "--json", fleet=fleet_file), fleet_file.parent,
                                 rng, tmp_path / f"{operation}.log", longest=1.0 if stack == "ocm" else 2.5)
        resumed = run(operation, "--auto-approve")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert_stack_end_state(state_path, fleet_name, clusters, lambda *a: run("plan", *a),
                               destroyed=operation == "destroy")
        for row in rows:
            row["survived"] = True if row["survived"] is None else row["survived"]
        record("crash", stack=stack, operation=operation, point=_random_point(where),
               survived=True if where["killed"] else "n/a")


def _argv(*args: str, fleet: Path) -> list[str]:
    import sys

    return [sys.executable, "-m", "fleetplan", *args, "-f", str(fleet)]
