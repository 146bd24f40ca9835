"""The saved plan file (`plan -out FILE`): a versioned JSON twin of `Plan`, and staleness checks.

Invariants:
- No secret value is ever written: every value under a step's sensitive paths (and a Secret's
  `data`/`stringData`) is replaced by `{"$redacted": "sha256:..."}`. Applying such a plan needs the
  fleet file again to restore those values, and refuses if their hashes differ (`restore_secrets`).
- The file carries the state's lineage and serial (lineage null: planned with no state) and the
  fingerprint of what was read; `check_fresh` refuses a plan whose state or clusters moved on,
  including the case of a plan made with no state when a state now exists.
- Written with mode 0600; format version checked on load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetplan.addrs import Address
from fleetplan.diff.changes import FieldChange
from fleetplan.errors import Diagnostic, PlanError
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.plan import bodies
from fleetplan.plan.model import FORMAT_VERSION, Action, Mode, Plan, Step
from fleetplan.stacks.desired import Readiness, ReadinessKind
from fleetplan.state.model import State, secret_hash

KIND = "fleetplan-plan"


def to_dict(plan: Plan) -> dict[str, Any]:
    return {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "fleet": plan.fleet,
        "mode": plan.mode.value,
        "prior_state": {"lineage": plan.lineage, "serial": plan.serial, "new_lineage": plan.new_lineage},
        "fingerprint": plan.fingerprint,
        "created_at": plan.created_at,
        "targets": list(plan.targets),
        "read_set": [[str(a), v] for a, v in plan.read_set],
        "clusters": [plan.clusters[c].as_dict() for c in sorted(plan.clusters)],
        "warnings": [w.as_dict() for w in plan.warnings],
        "steps": [_step_to_dict(s) for s in plan.steps],
    }


def save(plan: Plan, path: str | os.PathLike[str]) -> None:
    target = Path(path)
    fd = os.open(target, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(to_dict(plan), handle, indent=1)
        handle.write("\n")


def load(path: str | os.PathLike[str]) -> Plan:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PlanError(f"plan file {path} does not exist") from None
    except (OSError, ValueError) as err:
        raise PlanError(f"plan file {path} is unreadable or not JSON: {err}") from err
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise PlanError(
            f"{path} is not a fleetplan plan file", hint="create one with `fleetplan plan -out FILE`"
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise PlanError(
            f"plan file {path} has format {data.get('format_version')}; this fleetplan reads "
            f"format {FORMAT_VERSION}",
            hint="make the plan again with this fleetplan",
        )
    try:
        prior = data["prior_state"]
        return Plan(
            fleet=data["fleet"],
            mode=Mode(data["mode"]),
            steps=tuple(_step_from_dict(s) for s in data["steps"]),
            lineage=prior["lineage"],
            serial=int(prior["serial"]),
            new_lineage=prior.get("new_lineage"),
            fingerprint=data["fingerprint"],
            read_set=tuple((Address.parse(a), v) for a, v in data["read_set"]),
            clusters={c["name"]: ClusterAccess.from_dict(c) for c in data["clusters"]},
            warnings=tuple(
                Diagnostic(
                    w["summary"],
                    address=w.get("address"),
                    hint=w.get("hint"),
                    severity=w.get("severity", "warning"),
                )
                for w in data["warnings"]
            ),
            targets=tuple(data.get("targets", ())),
            created_at=data.get("created_at", ""),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise PlanError(f"plan file {path} is damaged: {type(err).__name__}: {err}") from err


def check_fresh(plan: Plan, state: State | None, fingerprint: str) -> None:
    """Raise `PlanError` if the state or the clusters changed since `plan` was made."""
    problems = []
    if plan.lineage is None and state is not None:
        problems.append(
            "the plan was made when no state existed, and a state now exists "
            f"(lineage {state.lineage}, serial {state.serial}); applying it again would "
            "duplicate or orphan objects"
        )
    elif plan.lineage is not None and state is None:
        problems.append(f"the plan was made against state lineage {plan.lineage}, which no longer exists")
    elif state is not None and plan.lineage != state.lineage:
        problems.append(f"the plan was made against state lineage {plan.lineage}, not {state.lineage}")
    elif state is not None and plan.serial != state.serial:
        problems.append(f"the state changed since the plan was made (serial {plan.serial} -> {state.serial})")
    if not problems and fingerprint != plan.fingerprint:
        problems.append("the clusters changed since the plan was made (what it read differs now)")
    if problems:
        raise PlanError(
            [Diagnostic(f"saved plan is stale: {p}", hint="run `fleetplan plan` again") for p in problems]
        )


def restore_secrets(plan: Plan, fresh: Mapping[Address, Mapping[str, Any]]) -> Plan:
    """Put redacted values back from fresh desired bodies; refuse if any hash differs."""
    from dataclasses import replace

    steps = []
    for step in plan.steps:
        if step.body is None or not _has_redactions(step.body):
            steps.append(step)
            continue
        source = fresh.get(step.address)
        body = _restore(step.body, source, str(step.address))
        steps.append(replace(step, body=body))
    return replace(plan, steps=tuple(steps))


def _restore(saved: Any, fresh: Any, where: str) -> Any:
    if isinstance(saved, Mapping) and set(saved) == {"$redacted"}:
        if not isinstance(fresh, str) or secret_hash(fresh) != saved["$redacted"]:
            raise PlanError(
                f"saved plan is stale: a sensitive value of {where} differs from the fleet file now",
                hint="run `fleetplan plan` again",
            )
        return fresh
    if isinstance(saved, Mapping):
        return {
            k: _restore(v, fresh.get(k) if isinstance(fresh, Mapping) else None, where)
            for k, v in saved.items()
        }
    if isinstance(saved, list):
        return [
            _restore(v, fresh[i] if isinstance(fresh, list) and i < len(fresh) else None, where)
            for i, v in enumerate(saved)
        ]
    return saved


def _has_redactions(value: Any) -> bool:
    if isinstance(value, Mapping):
        return set(value) == {"$redacted"} or any(_has_redactions(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_redactions(v) for v in value)
    return False


def _redact(value: Any, sensitive: tuple[str, ...], path: str = "") -> Any:
    if path and isinstance(value, str) and any(path == p or path.startswith(p + ".") for p in sensitive):
        return {"$redacted": secret_hash(value)}
    if isinstance(value, Mapping) and not ({"$ref"} == set(value) or {"$template"} == set(value)):
        return {k: _redact(v, sensitive, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, sensitive, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _step_to_dict(step: Step) -> dict[str, Any]:
    sensitive = step.sensitive_paths
    if step.body and step.body.get("kind") == "Secret" and step.body.get("apiVersion") == "v1":
        sensitive = (*sensitive, "data", "stringData")
    body = _redact(bodies.encode(step.body), tuple(sensitive)) if step.body is not None else None
    return {
        "address": str(step.address),
        "action": step.action.value,
        "reason": step.reason,
        "handler": step.handler,
        "api_version": step.api_version,
        "body": body,
        "depends_on": [str(a) for a in step.depends_on],
        "changes": [c.as_dict() for c in step.changes],
        "readiness": {
            "kind": step.readiness.kind.value,
            "condition_type": step.readiness.condition_type,
            "condition_status": step.readiness.condition_status,
            "timeout_seconds": step.readiness.timeout_seconds,
            "description": step.readiness.description,
        },
        "options": bodies.encode(step.options),
        "sensitive_paths": list(step.sensitive_paths),
        "live_uid": step.live_uid,
        "body_hash": step.body_hash,
        "graph_dependencies": [str(a) for a in step.graph_dependencies],
    }


def _step_from_dict(data: dict[str, Any]) -> Step:
    r = data["readiness"]
    return Step(
        address=Address.parse(data["address"]),
        action=Action(data["action"]),
        reason=data["reason"],
        handler=data["handler"],
        api_version=data["api_version"],
        body=bodies.decode(data["body"]) if data["body"] is not None else None,
        depends_on=tuple(Address.parse(a) for a in data["depends_on"]),
        changes=tuple(FieldChange(c["path"], c["before"], c["after"]) for c in data["changes"]),
        readiness=Readiness(
            ReadinessKind(r["kind"]),
            r.get("condition_type"),
            r.get("condition_status", "True"),
            r.get("timeout_seconds"),
            r.get("description", ""),
        ),
        options=bodies.decode(data["options"]),
        sensitive_paths=tuple(data["sensitive_paths"]),
        live_uid=data.get("live_uid"),
        body_hash=data.get("body_hash", ""),
        graph_dependencies=tuple(Address.parse(a) for a in data.get("graph_dependencies", [])),
    )
