"""`stack: none`: a fleet of generic `resources` only, with no Antrea or OCM settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleetplan.config.loading import load_fleet
from fleetplan.plan import fleets

FLEET = """\
apiVersion: fleetplan.dev/v1alpha1
kind: Fleet
metadata: {name: plain}
spec:
  stack: none
  leader: {name: north}
  members: [{name: west}]
  resources:
    - {clusters: all, path: ./extras/}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello, namespace: apps}\ndata: {greeting: hi}\n"


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "extras").mkdir(exist_ok=True)
    (tmp_path / "extras" / "cm.yaml").write_text(CONFIGMAP)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fleetplan", "validate", "--offline", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_resources_only_fleet_is_valid_and_renders_only_resources(tmp_path: Path) -> None:
    path = _write(tmp_path, FLEET)
    done = _validate(path)
    assert done.returncode == 0, done.stderr
    assert "valid (no stack, resources only, 1 leader, 1 member(s)" in done.stdout
    desired = fleets.desired_for(load_fleet(path, offline=True))
    assert sorted(str(r.address) for r in desired.resources) == [
        "north/core/ConfigMap/apps/hello", "west/core/ConfigMap/apps/hello"]


def test_stack_none_refuses_stack_settings_and_needs_resources(tmp_path: Path) -> None:
    text = FLEET.replace("  resources:\n    - {clusters: all, path: ./extras/}\n", "  version: v2.7.0\n")
    done = _validate(_write(tmp_path, text))
    assert done.returncode == 1
    assert "spec.stack: stack none has nothing to apply without spec.resources" in done.stderr
    assert "fleet.yaml:8:3: error: spec.version: spec.version is not used by stack none" in done.stderr


def test_antrea_and_ocm_still_need_version_and_cluster_set(tmp_path: Path) -> None:
    done = _validate(_write(tmp_path, FLEET.replace("stack: none", "stack: ocm")))
    assert done.returncode == 1
    assert "error: spec: missing required field 'version' (hint: stack ocm needs spec.version)" in done.stderr
    assert "missing required field 'clusterSet'" in done.stderr
