"""The JSON Schema of fleet.yaml, generated from the models.

`schemas/fleet.schema.json` is this module's output, checked in for editors (the examples carry
a `yaml-language-server: $schema=` comment) and kept fresh by a test. Regenerate it with

    python3 -m fleetplan.config.schema > schemas/fleet.schema.json

Per-field titles that pydantic derives from attribute names are dropped (they only repeat the
key); descriptions, defaults, enums and patterns stay.
"""

from __future__ import annotations

import json
from typing import Any

from fleetplan.config.models import Fleet

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _drop_titles(node: Any, *, keep: bool = False) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and not keep and isinstance(value, str):
                continue
            # property names are data, not keywords: a property called "title" must survive
            out[key] = ({k: _drop_titles(v) for k, v in value.items()} if key in ("properties", "$defs")
                        and isinstance(value, dict) else _drop_titles(value))
        return out
    if isinstance(node, list):
        return [_drop_titles(v) for v in node]
    return node


def fleet_json_schema() -> dict[str, Any]:
    """The schema as a dict: draft 2020-12, keyed by the camelCase fleet.yaml names."""
    schema = Fleet.model_json_schema(by_alias=True, mode="validation")
    body = _drop_titles(schema)
    return {"$schema": SCHEMA_DIALECT, "title": "fleetplan Fleet (fleetplan.dev/v1alpha1)",
            "description": "fleet.yaml: a Kubernetes multi-cluster fleet that fleetplan plans, applies "
                           "and destroys.", **{k: v for k, v in body.items() if k != "title"}}


def render_schema() -> str:
    """The schema file's exact text."""
    return json.dumps(fleet_json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(render_schema(), end="")
