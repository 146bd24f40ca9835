"""The `Fleet` CustomResourceDefinition, generated from the same models as fleet.yaml.

`schemas/fleet.crd.yaml` is this module's output, checked in (the Helm chart ships a copy) and
tested for staleness. Regenerate both with

    python3 -m fleetplan.config.crd > schemas/fleet.crd.yaml
    cp schemas/fleet.crd.yaml charts/fleetplan/crds/fleet.crd.yaml

The resource's `spec` is exactly fleet.yaml's `spec`; the controller validates it with the models
and reports problems in status, so the CRD's schema is the structural subset Kubernetes accepts:
`$ref`s are inlined, `X | None` becomes X, `const` becomes a one-value enum, and keywords that
structural schemas forbid or that would make the API server rewrite objects (defaults, titles,
examples, `additionalProperties: false` next to `properties`, unknown formats) are dropped. The
only union a structural schema cannot express, a cluster selector (a word or a list of names),
keeps its value as given (`x-kubernetes-preserve-unknown-fields`).
"""

from __future__ import annotations

from typing import Any

from fleetplan.config.models import Fleet

GROUP = "fleetplan.dev"
VERSION = "v1alpha1"
PLURAL = "fleets"
_DROPPED = {"default", "title", "examples", "$id", "$schema", "format"}

_CONDITION = {
    "type": "object",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {"type": "string", "maxLength": 316, "description": "Ready, Progressing, Degraded, or "
                 "clusters.fleetplan.dev/<cluster> for one cluster."},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "reason": {"type": "string", "maxLength": 1024},
        "message": {"type": "string", "maxLength": 32768},
    },
}
_STATUS = {
    "type": "object",
    "description": "Written by `fleetplan controller`.",
    "properties": {
        "observedGeneration": {"type": "integer", "format": "int64",
                               "description": "The spec generation the conditions describe."},
        "conditions": {"type": "array", "items": _CONDITION, "x-kubernetes-list-type": "map",
                       "x-kubernetes-list-map-keys": ["type"]},
        "lastPlan": {
            "type": "object",
            "description": "The last plan the controller made and applied.",
            "properties": {
                "time": {"type": "string", "format": "date-time"},
                "mode": {"type": "string"},
                "add": {"type": "integer"},
                "change": {"type": "integer"},
                "destroy": {"type": "integer"},
                "failed": {"type": "integer"},
                "summary": {"type": "string"},
            },
        },
        "clusters": {"type": "array", "description": "The clusters of the last reconcile.",
                     "items": {"type": "string"}},
    },
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        merged = {**defs[node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            return _inline({**options[0], **rest, "nullable": True}, defs)
        # a word or a list (cluster selectors): not structural; the models validate it
        return {**{k: v for k, v in rest.items() if k not in _DROPPED},
                "x-kubernetes-preserve-unknown-fields": True}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "const":
            out["enum"] = [value]
            out.setdefault("type", "string")
        elif key == "properties":
            out[key] = {name: _inline(prop, defs) for name, prop in value.items()}
        elif key == "additionalProperties" and value is False:
            continue
        else:
            out[key] = _inline(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def spec_schema() -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a Fleet's `spec`."""
    schema = Fleet.model_json_schema(by_alias=True, mode="validation")
    spec: dict[str, Any] = _inline(schema["properties"]["spec"], schema["$defs"])
    return spec


def fleet_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}",
                     "annotations": {"fleetplan.dev/generated-by": "python3 -m fleetplan.config.crd"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "fleet", "kind": "Fleet", "listKind": "FleetList",
                      "categories": ["fleetplan"]},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Stack", "type": "string", "jsonPath": ".spec.stack"},
                    {"name": "Ready", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Reason", "type": "string",
                     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A Kubernetes multi-cluster fleet that `fleetplan controller` keeps in "
                                   "the shape its spec describes (the spec of fleet.yaml).",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": _STATUS,
                    },
                }},
            }],
        },
    }


def render_crd() -> str:
    """The CRD file's exact text (YAML, keys in a stable order)."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    out = io.StringIO()
    out.write("# Generated by `python3 -m fleetplan.config.crd`; do not edit by hand.\n")
    yaml.dump(fleet_crd(), out)
    return out.getvalue()


if __name__ == "__main__":
    print(render_crd(), end="")
