"""A `Fleet` custom resource (controller mode) turned into the same frozen `Fleet` as fleet.yaml.

The resource's `spec` is validated by the fleet.yaml models and semantic checks, so a resource
and a file with the same spec mean the same fleet. Differences, all deliberate:
- Problems are located as `Fleet <namespace>/<name>` plus the field path (there is no file, so no
  line numbers); the controller puts them in the resource's status.
- Only `metadata.name` is taken from the resource's metadata (the fleet's ownership label).
- `kubeconfigSecret` references are resolved by the caller, which passes the temporary file each
  was written to; those paths replace `kubeconfig` before validation, so the kubeconfig checks
  run against what the controller will really use.
- Relative paths (`resources[].path`, `manifests.mirror`) resolve against `base_dir`, the
  controller's manifests directory.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleetplan.config.checking import check_semantics
from fleetplan.config.models import API_VERSION, KIND, Fleet
from fleetplan.config.positions import Positions
from fleetplan.errors import ConfigError, Diagnostic, Location


def resource_label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"Fleet {meta.get('namespace', '')}/{meta.get('name', '')}"


def secret_refs(obj: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Cluster name -> (Secret name, key) for every `kubeconfigSecret` in the resource's spec."""
    spec = obj.get("spec") or {}
    found: dict[str, tuple[str, str]] = {}
    for cluster in [spec.get("leader") or {}, *(spec.get("members") or [])]:
        ref = cluster.get("kubeconfigSecret") if isinstance(cluster, dict) else None
        if isinstance(ref, dict) and ref.get("name") and cluster.get("name"):
            found[str(cluster["name"])] = (str(ref["name"]), str(ref.get("key") or "kubeconfig"))
    return found


def fleet_from_resource(obj: Mapping[str, Any], *, base_dir: Path,
                        kubeconfigs: Mapping[str, Path] | None = None, offline: bool = False) -> Fleet:
    """The validated Fleet of a custom resource; raises ConfigError with every problem found."""
    label = resource_label(obj)
    spec = copy.deepcopy(dict(obj.get("spec") or {}))
    for cluster in [spec.get("leader") or {}, *(spec.get("members") or [])]:
        if isinstance(cluster, dict) and cluster.get("name") in (kubeconfigs or {}):
            cluster["kubeconfig"] = str((kubeconfigs or {})[cluster["name"]])
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": (obj.get("metadata") or {}).get("name")},
           "spec": spec}
    positions = Positions(label, doc)
    try:
        fleet = Fleet.model_validate(doc, context={"base_dir": str(base_dir)})
    except ValidationError as err:
        from fleetplan.config.explaining import explain_validation_error

        raise ConfigError(_unlocated(explain_validation_error(Fleet, err, positions), label)) from None
    fleet, findings = check_semantics(fleet, positions, offline=offline)
    errors = [d for d in findings if d.severity == "error"]
    if errors:
        raise ConfigError(_unlocated(errors, label))
    return fleet


def _unlocated(diagnostics: Any, label: str) -> list[Diagnostic]:
    """Field paths kept, line numbers (meaningless without a file) dropped."""
    out = []
    for diag in diagnostics:
        path = diag.location.path if diag.location else ""
        out.append(Diagnostic(diag.summary, Location(label, None, None, path), diag.address, diag.hint,
                              diag.severity))
    return out
