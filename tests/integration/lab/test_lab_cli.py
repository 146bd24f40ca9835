"""`fleetplan lab up|status|kubeconfig|down` across processes: state on disk, nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kit.fleets import run_cli

from fleetplan.lab.indices import registry_dir
from fleetplan.lab.processes import ProcessRecord, is_running

pytestmark = pytest.mark.integration


def _fleetplan(*args, env, cwd):
    return run_cli(*args, cwd=cwd, check=None, env=env, timeout=600)


def _group_members(pgid):
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def test_cli_lab_lifecycle_from_separate_processes(lab_bin, tmp_path):
    env = {"FLEETPLAN_LAB_BIN": str(lab_bin), "FLEETPLAN_LAB_DIR": str(tmp_path / "lab")}
    # Indices are chosen so this lab never shares addresses with the session lab (or anyone's).
    started = _fleetplan("lab", "up", "--clusters", "1", "--name", "cli", env=env, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    try:
        state = json.loads((tmp_path / "lab" / "lab.json").read_text())
        index = state["clusters"][0]["index"]
        assert f"https://127.0.{index}.1:" in started.stdout
        assert (registry_dir() / "claims" / str(index)).read_text().strip() == str(tmp_path / "lab")
        records = [ProcessRecord.from_dict(p) for p in state["clusters"][0]["processes"]]
        assert {r.component for r in records} == {"egress-proxy", "etcd", "kube-apiserver",
                                                  "kube-controller-manager", "kube-scheduler", "kwok"}
        assert all(is_running(r) for r in records)

        status = _fleetplan("lab", "status", env=env, cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith("cli1     up")

        path = _fleetplan("lab", "kubeconfig", env=env, cwd=tmp_path).stdout.strip()
        assert path == str(tmp_path / "lab" / "kubeconfig")
        config = json.loads(Path(path).read_text())
        assert [c["name"] for c in config["contexts"]] == ["cli1"]
        assert Path(path).stat().st_mode & 0o077 == 0  # it holds a client key
        assert "BEGIN" not in started.stdout + status.stdout  # no key material is ever printed
    finally:
        stopped = _fleetplan("lab", "down", env=env, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 6 processes" in stopped.stdout
    assert not any(is_running(r) for r in records)
    assert all(_group_members(r.pid) == [] for r in records)
    assert (tmp_path / "lab" / "cli1" / "logs" / "kube-apiserver.log").stat().st_size > 0
    after = _fleetplan("lab", "status", env=env, cwd=tmp_path)
    assert after.returncode == 1
    assert "no lab in" in after.stderr
    assert not (registry_dir() / "claims" / str(index)).exists()
