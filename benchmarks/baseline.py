"""The baseline: the same work done one cluster after another with kubectl, as users script today.

`write_scripts` writes two bash scripts into the fleet directory, each a plain loop over the
clusters with the member's own kubeconfig copy (so kubectl goes through the same latency proxy):

    baseline-apply.sh   kubectl apply --server-side -f manifests-kubectl/<cluster>.json, leader first
    baseline-diff.sh    kubectl diff --server-side -f ... (the drift check users run before applying)

That is what `antctl mc` / `clusteradm` loops amount to: one process and one connection per
cluster, each waiting for the previous one. kubectl keeps its discovery cache (~/.kube/cache)
between invocations, as it does for users. The manifests are the fleet's, under another name
(`<fleet>k`), so the baseline and fleetplan never touch each other's objects.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from scalefleet import LEADER, ScaleFleet, write_manifests


def baseline_name(fleet_name: str) -> str:
    return fleet_name + "k"


def write_scripts(fleet: ScaleFleet, kubectl: str) -> tuple[Path, Path]:
    manifests = fleet.root / "manifests-kubectl"
    write_manifests(manifests, baseline_name(fleet.name), fleet.members)
    clusters = (LEADER, *fleet.members)
    apply_lines = [
        f"{shlex.quote(kubectl)} --kubeconfig kubeconfigs/{c} apply --server-side --field-manager=baseline "
        f"-f manifests-kubectl/{c}.json >/dev/null" for c in clusters
    ]
    # kubectl diff exits 1 when there are differences: that is a finding, not a failure of the loop.
    diff_lines = [
        f"{shlex.quote(kubectl)} --kubeconfig kubeconfigs/{c} diff --server-side --field-manager=baseline "
        f"-f manifests-kubectl/{c}.json >/dev/null || [ $? -eq 1 ]" for c in clusters
    ]
    apply_script = fleet.root / "baseline-apply.sh"
    diff_script = fleet.root / "baseline-diff.sh"
    for path, lines in ((apply_script, apply_lines), (diff_script, diff_lines)):
        path.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + "\n".join(lines) + "\n")
        path.chmod(0o755)
    return apply_script, diff_script
