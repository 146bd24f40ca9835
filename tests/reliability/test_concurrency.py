"""Concurrency: one apply at a time per state, locks left by killed runs, stale saved plans.

All runs are real `fleetplan` subprocesses against the lab, on the `resources` stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fleetkit import ResourcesFleet, assert_clean_end_state, cli_env, record

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(tmp_path: Path, lab: Any, destroy_later: Any) -> Any:
    made = ResourcesFleet(tmp_path, lab, prefix="c")
    destroy_later(made)
    return made


def _lock_path(fleet: ResourcesFleet) -> Path:
    return fleet.state_path.with_name(fleet.state_path.name + ".lock")


def test_second_apply_is_refused_naming_the_holder(fleet: ResourcesFleet) -> None:
    first = subprocess.Popen(fleet.command("apply", "--auto-approve"), cwd=fleet.root, env=cli_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = _lock_path(fleet)
    deadline = time.monotonic() + 60
    held: dict[str, Any] = {}
    while not held and time.monotonic() < deadline and first.poll() is None:
        try:  # the lock file is created first, then filled: wait until it names its holder
            held = json.loads(lock.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.02)
    second = fleet.run("apply", "--auto-approve", check=None)
    _out, err = first.communicate(timeout=300)
    ok = (second.returncode == 4 and f"pid {first.pid}" in second.stderr and held["id"] in second.stderr
          and "force-unlock" in second.stderr and "Traceback" not in second.stderr and first.returncode == 0)
    record("concurrency", scenario="two applies at once", outcome=f"second exit {second.returncode}: "
           f"{second.stderr.strip().splitlines()[0]}; first exit {first.returncode}", ok=ok)
    assert ok, f"{second.returncode}\n{second.stderr}\nfirst: {first.returncode}\n{err}"
    assert_clean_end_state(fleet)


def test_lock_of_a_killed_run_is_reported_and_taken_over(fleet: ResourcesFleet) -> None:
    killed = fleet.run("apply", "--auto-approve", check=None, env={"FLEETPLAN_TEST_KILL_AT": "finish:4"})
    assert killed.returncode == -9
    left = json.loads(_lock_path(fleet).read_text())
    resumed = fleet.run("apply", "--auto-approve")
    ok = ("took over the lock left by" in resumed.stderr and f"pid {left['pid']}" in resumed.stderr
          and left["id"] in resumed.stderr)
    record("concurrency", scenario="lock left by a SIGKILLed apply (same host)",
           outcome=f"next apply warned: {resumed.stderr.strip().splitlines()[0][:160]}; exit 0", ok=ok)
    assert ok, resumed.stderr
    assert_clean_end_state(fleet)


def test_lock_held_from_another_host_needs_force_unlock(fleet: ResourcesFleet) -> None:
    fleet.run("apply", "--auto-approve")
    lock = _lock_path(fleet)
    foreign = {"id": "5b7f1c9e-0000-4000-8000-00000000cafe", "holder": "ci@runner-7", "host": "runner-7",
               "pid": 4242, "created": "2026-01-01T00:00:00+00:00", "operation": "apply"}
    lock.write_text(json.dumps(foreign))
    refused = fleet.run("apply", "--auto-approve", check=None)
    destroy_refused = fleet.run("destroy", "--auto-approve", check=None)
    wrong = fleet.run("force-unlock", "00000000-0000-0000-0000-000000000000", check=None)
    still_locked = lock.exists()
    cleared = fleet.run("force-unlock", foreign["id"], check=None)
    after = fleet.run("apply", "--auto-approve", check=None)
    ok = (refused.returncode == 4 and "ci@runner-7" in refused.stderr and foreign["id"] in refused.stderr
          and destroy_refused.returncode == 4 and wrong.returncode != 0 and still_locked
          and cleared.returncode == 0 and not lock.exists() and after.returncode == 0)
    record("concurrency", scenario="lock held from another host",
           outcome=f"apply/destroy exit {refused.returncode}/{destroy_refused.returncode} naming ci@runner-7; "
           f"force-unlock with a wrong ID exit {wrong.returncode} (lock kept); with the right ID exit "
           f"{cleared.returncode}; apply then exit {after.returncode}", ok=ok)
    assert ok, "\n".join(r.stderr for r in (refused, destroy_refused, wrong, cleared, after))


def test_stale_saved_plans_are_refused(fleet: ResourcesFleet) -> None:
    fleet.run("plan", "-out", "first.plan")
    fleet.run("plan", "-out", "twin.plan")
    fleet.run("apply", "first.plan")
    replay = fleet.run("apply", "twin.plan", check=None)  # made against no state: Terraform's hole
    fleet.write_manifests(color="red")
    fleet.run("plan", "-out", "second.plan")
    fleet.run("apply", "--auto-approve")
    stale = fleet.run("apply", "second.plan", check=None)
    fleet.write_manifests(color="green")
    fleet.run("plan", "-out", "third.plan")
    fleet.clients()["c2"].delete("v1", "ConfigMap", fleet.ns, "settings")
    moved = fleet.run("apply", "third.plan", check=None)
    state_before = fleet.state_path.read_bytes()
    cases = [("a plan made before the first apply, applied after it", replay),
             ("a plan older than the state's serial", stale),
             ("a plan whose clusters changed since it was made", moved)]
    all_ok = True
    for scenario, done in cases:
        ok = done.returncode == 1 and "Traceback" not in done.stderr and bool(done.stderr.strip())
        all_ok &= ok
        record("concurrency", scenario=f"stale saved plan: {scenario}",
               outcome=f"exit {done.returncode}: {done.stderr.strip().splitlines()[0][:200]}", ok=ok)
    assert all_ok, "\n".join(d.stderr for _, d in cases)
    assert fleet.state_path.read_bytes() == state_before
    assert not os.path.exists(_lock_path(fleet))
