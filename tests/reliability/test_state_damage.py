"""Damaged state files: every command that reads the state stops with a clear error, never a
traceback, never writes over the damaged file (or its backup), and the documented way back
(copy `<state>.backup` over it) works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fleetkit import ResourcesFleet, assert_clean_end_state, record, run_in_process, with_only

pytestmark = pytest.mark.integration


def _truncate(text: str) -> str:
    return text[: len(text) // 2]


def _garble(text: str) -> str:
    data = bytearray(text.encode())
    for i in range(10, len(data), 97):
        data[i] = (data[i] * 7 + 13) % 256
    return data.decode("utf-8", "replace")


def _with(**changes: Any) -> Callable[[str], str]:
    def damage(text: str) -> str:
        doc = json.loads(text)
        doc.update(changes)
        return json.dumps(doc)

    return damage


DAMAGES: dict[str, Callable[[str], str]] = {
    "truncated to half": _truncate,
    "empty file": lambda _: "",
    "corrupted bytes": _garble,
    "not a JSON object": lambda _: "[1, 2, 3]\n",
    "wrong version (format_version \"one\")": _with(format_version="one"),
    "wrong version (format_version 0)": _with(format_version=0),
    "future version (format_version 99)": _with(format_version=99),
    "no format_version": lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "format_version"}),
    "resources of the wrong type": _with(resources="everything"),
    "a resource with a bad address": lambda t: json.dumps(
        {**json.loads(t), "resources": [{**json.loads(t)["resources"][0], "address": "not/an/address"}]}),
}
COMMANDS = [("plan",), ("apply", "--auto-approve"), ("destroy", "--auto-approve"), ("state", "list"),
            ("show",), ("force-unlock", "00000000-0000-0000-0000-000000000000")]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory, lab: Any) -> Any:
    fleet = ResourcesFleet(tmp_path_factory.mktemp("damage"), lab, prefix="s")
    fleet.run("apply", "--auto-approve")
    fleet.write_manifests(color="red")  # a second apply, so the backup is a real earlier state
    fleet.run("apply", "--auto-approve")
    yield fleet
    fleet.state_path.write_bytes(fleet.state_path.with_name(fleet.state_path.name + ".good").read_bytes())
    fleet.run("destroy", "--auto-approve", check=None)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_state_is_refused_and_the_backup_restores(applied: ResourcesFleet, damage: str) -> None:
    fleet = applied
    state, backup = fleet.state_path, fleet.state_path.with_name(fleet.state_path.name + ".backup")
    good = fleet.state_path.with_name(fleet.state_path.name + ".good")
    if not good.exists():
        good.write_bytes(state.read_bytes())
    state.write_bytes(good.read_bytes())
    backup_before = backup.read_bytes()
    damaged = DAMAGES[damage](good.read_text())
    state.write_text(damaged)
    errors, problems = [], []
    for command in COMMANDS:
        code, _, stderr = run_in_process(fleet.root, *with_only(command))
        first = stderr.strip().splitlines()[0] if stderr.strip() else ""
        errors.append(first)
        if command[0] == "force-unlock":  # no state read needed; must still not touch the state
            continue
        if code != 1:
            problems.append(f"{' '.join(command)} exited {code}")
        if "Traceback" in stderr or "internal error" in stderr:
            problems.append(f"{' '.join(command)} crashed: {stderr[-300:]}")
        if state.name not in stderr:
            problems.append(f"{' '.join(command)} does not name the state file: {first}")
    untouched = state.read_text() == damaged and backup.read_bytes() == backup_before
    lock_left = state.with_name(state.name + ".lock").exists()
    # The documented way back: the backup is the previous good state; plan works from it.
    state.write_bytes(backup.read_bytes())
    restored = fleet.run("plan", "--detailed-exitcode", check=None)
    ok = not problems and untouched and not lock_left and restored.returncode in (0, 2)
    hint = next((line for line in errors[0:1]), "")
    record("state", damage=damage, error=hint[:220], untouched="yes" if untouched else "NO",
           restored=f"plan exit {restored.returncode}", ok=ok)
    state.write_bytes(good.read_bytes())
    assert not problems, problems
    assert untouched, "a damaged state or its backup was overwritten"
    assert not lock_left
    assert restored.returncode in (0, 2), restored.stderr


def test_every_write_keeps_the_previous_state_as_backup(applied: ResourcesFleet) -> None:
    fleet = applied
    good = fleet.state_path.with_name(fleet.state_path.name + ".good")
    if good.exists():
        fleet.state_path.write_bytes(good.read_bytes())
    before = json.loads(fleet.state_path.read_text())
    fleet.write_manifests(color="violet")
    fleet.run("apply", "--auto-approve")
    after = json.loads(fleet.state_path.read_text())
    backup = json.loads(fleet.state_path.with_name(fleet.state_path.name + ".backup").read_text())
    ok = after["serial"] > before["serial"] and backup["serial"] == after["serial"] - 1 \
        and after["lineage"] == before["lineage"] and oct(fleet.state_path.stat().st_mode & 0o777) == "0o600"
    # The way back: the backup (one apply older) over the state; apply adopts what it does not record.
    fleet.state_path.write_bytes(fleet.state_path.with_name(fleet.state_path.name + ".backup").read_bytes())
    fleet.write_manifests(color="teal")
    fleet.run("apply", "--auto-approve")
    assert_clean_end_state(fleet)
    record("state", damage="(none) a normal apply, then the backup restored and applied", error="-",
           untouched=f"serial {before['serial']} -> {after['serial']}, backup at {backup['serial']}",
           restored="apply from the backup: clean end state", ok=ok)
    assert ok
    good.write_bytes(fleet.state_path.read_bytes())
