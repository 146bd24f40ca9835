"""The crash-test kill switch fires only when test hooks are explicitly on, and says so loudly."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleetplan.apply import killing

ROOT = Path(__file__).resolve().parents[3]

# A child that builds the switches from its environment and then passes one finished step.
_CHILD = """
from fleetplan.addrs import Address
from fleetplan.apply.hooks import Outcome, Status
from fleetplan.apply.killing import kill_switches
from fleetplan.plan.model import Action, Step

settled = []
before, after = kill_switches(lambda: settled.append(1) or print("settled", flush=True))
step = Step(Address.parse("c1/v1/ConfigMap/ns/cm"), Action.CREATE, "missing")
for hook in (*before, *after):
    hook.step_finished(Outcome(step, Status.OK))
print("survived", len(before) + len(after))
"""


def _run_child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env})


def test_a_stray_kill_at_variable_alone_kills_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(killing.ENV_TEST_HOOKS, raising=False)
    monkeypatch.setenv(killing.ENV_KILL_AT, "finish:1")
    assert killing.kill_switches(lambda: None) == ([], [])
    done = _run_child({killing.ENV_KILL_AT: "finish:1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "survived 0"


def test_both_variables_kill_at_the_exact_point() -> None:
    done = _run_child({killing.ENV_KILL_AT: "finish:1", killing.ENV_TEST_HOOKS: "1"})
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)
    assert "survived" not in done.stdout
    assert done.stdout.strip() == "settled"  # the recorded step was made durable before the kill


@pytest.mark.parametrize("value", ["0", "true", "yes", ""])
def test_only_the_exact_value_1_turns_hooks_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(killing.ENV_TEST_HOOKS, value)
    monkeypatch.setenv(killing.ENV_KILL_AT, "start:1")
    assert killing.kill_switches(lambda: None) == ([], [])


def test_notice_is_loud_when_on_and_explains_when_half_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(killing.ENV_TEST_HOOKS, raising=False)
    monkeypatch.delenv(killing.ENV_KILL_AT, raising=False)
    assert killing.test_hooks_notice() is None
    monkeypatch.setenv(killing.ENV_KILL_AT, "start:2")
    half = killing.test_hooks_notice()
    assert half is not None and "ignored" in half
    monkeypatch.setenv(killing.ENV_TEST_HOOKS, "1")
    on = killing.test_hooks_notice()
    assert on is not None and on.startswith("WARNING") and "start:2" in on
