"""Exec credential plugins run under a hard time limit and leave no process behind.

The plugins are small shell scripts that record the pids of everything they start; after loading
the kubeconfig, none of those processes (and nothing else in the plugin's process group) may
still run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleetplan.errors import ClusterError
from fleetplan.live import kubeconfigs
from fleetplan.live.kubeconfigs import ClusterAccess, new_api_client

CREDENTIAL = '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", ' \
             '"status": {"token": "plugin-token"}}'


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(kubeconfig whose exec plugin is `plugin.sh`, file the plugin appends pids to)."""
    pids = tmp_path / "pids"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c1",
        "clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin.sh",
            "env": [{"name": "PIDS", "value": str(pids)}], "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c1", "context": {"cluster": "c1", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    yield path, pids
    for line in pids.read_text().split() if pids.exists() else []:  # never leave a sleep behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line), signal.SIGKILL)


def _write_plugin(kubeconfig: Path, body: str) -> None:
    script = kubeconfig.with_name("plugin.sh")
    script.write_text("#!/bin/sh\necho $$ >> \"$PIDS\"\n" + body)
    script.chmod(0o755)


def _assert_nothing_left(pids: Path) -> None:
    started = [int(p) for p in pids.read_text().split()]
    assert started, "the plugin did not run"
    deadline = time.monotonic() + 5
    while any(_running(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in started if _running(p)] == []
    assert _group_members(started[0]) == []  # the plugin led its own group: nothing of it remains


def test_a_hanging_plugin_fails_within_the_timeout_and_is_killed_with_its_children(
        plugin: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig, pids = plugin
    _write_plugin(kubeconfig, "sleep 600 &\necho $! >> \"$PIDS\"\nwait\n")
    monkeypatch.setattr(kubeconfigs, "EXEC_TIMEOUT_SECONDS", 2.0)
    began = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        new_api_client(ClusterAccess("hangs", str(kubeconfig)))
    elapsed = time.monotonic() - began
    message = str(caught.value)
    assert "cluster hangs" in message and "did not finish within 2s" in message, message
    assert elapsed < 10, elapsed
    _assert_nothing_left(pids)


def test_a_plugin_that_answers_but_leaves_a_child_holding_its_output_does_not_block(
        plugin: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig, pids = plugin
    _write_plugin(kubeconfig, f"sleep 600 &\necho $! >> \"$PIDS\"\necho '{CREDENTIAL}'\n")
    monkeypatch.setattr(kubeconfigs, "EXEC_TIMEOUT_SECONDS", 20.0)
    began = time.monotonic()
    client = new_api_client(ClusterAccess("leaves-child", str(kubeconfig)))
    assert time.monotonic() - began < 10
    assert client.configuration.api_key["BearerToken"] == "Bearer plugin-token"
    _assert_nothing_left(pids)


def test_a_plugin_that_fails_is_a_one_line_error_naming_the_cluster(plugin: tuple[Path, Path]) -> None:
    kubeconfig, pids = plugin
    _write_plugin(kubeconfig, "echo 'no credentials for you' >&2\nexit 3\n")
    with pytest.raises(ClusterError, match=r"cluster fails: the credential plugin .* failed: .*returned 3"):
        new_api_client(ClusterAccess("fails", str(kubeconfig)))
    _assert_nothing_left(pids)
