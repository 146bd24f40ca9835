"""The two views of a plan: human text like Terraform's, and the versioned JSON document.

The human view nests each step's attributes one per line and collapses large values
(`fleetplan.plan.blocks`); the JSON view always carries every (masked) value in full.

Invariants: pure functions of a `Plan` (no clock, no environment), so golden files are stable;
values shown are the masked ones the plan holds, so no secret can reach output; colour is ANSI and
only when asked for. The JSON form is documented in docs/json-format.md; `JSON_FORMAT_VERSION`
changes its minor number for additions and its major number for anything else.
"""

from __future__ import annotations

import json
from typing import Any

from fleetplan.diff.changes import ABSENT
from fleetplan.plan import blocks, unknowns
from fleetplan.plan.model import Action, Mode, Plan, Step

JSON_FORMAT_VERSION = "1.0"
NO_CHANGES = "No changes. Your fleet matches the configuration."
COLLAPSED_NOTE = (
    "Values marked (collapsed) are too large to read here; `fleetplan plan --json` and\n"
    "`fleetplan show PLANFILE --json` print every value (sensitive ones stay masked)."
)

_SYMBOL = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.DELETE: "-",
    Action.REPLACE: "-/+",
    Action.READ: "<=",
    Action.NOOP: " ",
    Action.UNKNOWN: "?",
}
_COLOUR = {
    Action.CREATE: "32",
    Action.UPDATE: "33",
    Action.DELETE: "31",
    Action.REPLACE: "35",
    Action.READ: "36",
    Action.NOOP: "0",
    Action.UNKNOWN: "31",
}
_PHRASE = {
    Action.CREATE: "will be created",
    Action.UPDATE: "will be updated in place",
    Action.DELETE: "will be deleted",
    Action.REPLACE: "must be replaced",
    Action.READ: "will be read",
    Action.UNKNOWN: "is unknown",
}


def render_human(plan: Plan, *, color: bool = False) -> str:
    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color and code != "0" else text

    lines: list[str] = []
    for warning in plan.warnings:
        label, code = ("Error", "31") if warning.severity == "error" else ("Warning", "33")
        lines.append(paint(f"{label}: ", code) + warning.render().split(f": {warning.severity}: ", 1)[-1])
    if lines:
        lines.append("")
    shown = [s for s in plan.steps if s.action != Action.NOOP]
    if plan.mode == Mode.REFRESH_ONLY:
        return _render_refresh(plan, shown, lines, paint)
    if not plan.has_changes and not any(s.action in (Action.READ, Action.UNKNOWN) for s in shown):
        lines.append(NO_CHANGES)
        return "\n".join(lines) + "\n"
    lines.append("fleetplan will perform the following actions:")
    collapsed: list[bool] = []
    for step in shown:
        lines.append("")
        lines.extend(_render_step(step, paint, collapsed))
    add, change, destroy = plan.counts()
    lines.append("")
    if collapsed:
        lines.extend([COLLAPSED_NOTE, ""])
    unknown = sum(s.action == Action.UNKNOWN and not unknowns.is_root(s) for s in plan.steps)
    lines.append(
        paint("Plan:", "1")
        + f" {add} to add, {change} to change, {destroy} to destroy."
        + (f" {unknown} unknown (clusters that could not be read)." if unknown else "")
    )
    return "\n".join(lines) + "\n"


def _render_refresh(plan: Plan, shown: list[Step], lines: list[str], paint: Any) -> str:
    if not shown:
        lines.append("No changes. The state matches the clusters.")
        return "\n".join(lines) + "\n"
    lines.append("fleetplan detected the following changes made outside fleetplan:")
    collapsed: list[bool] = []
    for step in shown:
        lines.append("")
        lines.append(f"  # {step.address} {step.reason}")
        symbol, code = ("?", "31") if step.action == Action.UNKNOWN else ("~", "33")
        head = "  " + paint(symbol, code) + f" {step.address}"
        lines.extend(_block(head, step, paint, collapsed) if step.changes else [head])
    lines.append("")
    if collapsed:
        lines.extend([COLLAPSED_NOTE, ""])
    unknown = sum(s.action == Action.UNKNOWN and not unknowns.is_root(s) for s in shown)
    shown_drift = sum(s.action != Action.UNKNOWN for s in shown)
    drifted = f"{shown_drift} drifted" + (f", {unknown} unknown" if unknown else "")
    lines.append(f"Refresh: {drifted}. Applying this plan updates the state only.")
    return "\n".join(lines) + "\n"


def _render_step(step: Step, paint: Any, collapsed: list[bool]) -> list[str]:
    symbol, code = _SYMBOL[step.action], _COLOUR[step.action]
    out = [f"  # {step.address} {_PHRASE[step.action]} ({step.reason})"]
    head = "  " + paint(symbol, code) + f" {step.address}"
    if step.action == Action.DELETE or not step.changes:
        return [*out, head]
    return [*out, *_block(head, step, paint, collapsed)]


def _block(head: str, step: Step, paint: Any, collapsed: list[bool]) -> list[str]:
    rendered = blocks.render_changes(step.changes, step.body, 6, paint)
    if rendered.collapsed:
        collapsed.append(True)
    return [head + " {", *rendered.lines, "    }"]


def to_json_document(plan: Plan) -> dict[str, Any]:
    add, change, destroy = plan.counts()
    return {
        "format_version": JSON_FORMAT_VERSION,
        "fleet": plan.fleet,
        "mode": plan.mode.value,
        "prior_state": {"lineage": plan.lineage, "serial": plan.serial},
        "fingerprint": plan.fingerprint,
        "targets": list(plan.targets),
        "has_changes": plan.has_changes,
        "summary": {"add": add, "change": change, "destroy": destroy},
        "resource_changes": [
            {
                "address": str(s.address),
                "cluster": s.address.cluster,
                "group": s.address.group,
                "kind": s.address.kind,
                "namespace": s.address.namespace,
                "name": s.address.name,
                "action": s.action.value,
                "reason": s.reason,
                "handler": s.handler,
                "depends_on": [str(a) for a in s.depends_on],
                "changes": [
                    {"path": c.path, "before": _json_value(c.before), "after": _json_value(c.after)}
                    for c in s.changes
                ],
            }
            for s in plan.steps
        ],
        "diagnostics": [w.as_dict() for w in plan.warnings],
    }


def render_json(plan: Plan) -> str:
    return json.dumps(to_json_document(plan), indent=2, sort_keys=False) + "\n"


def _json_value(value: Any) -> Any:
    return None if value is ABSENT else value
