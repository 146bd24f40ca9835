"""Turning pydantic validation errors into diagnostics a user can act on.

Each pydantic error becomes one `Diagnostic` at the YAML position of the offending key or value,
with the field path, what was expected, what was found, and a hint: the nearest allowed key for
an unknown key (difflib, plus the camelCase spelling of a snake_case key), the nearest allowed
value for an enum, and the field's description for a missing field. The model classes are walked
by alias to know what is allowed at each path, so the messages follow the models without a table.
"""

from __future__ import annotations

import datetime
import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from fleetplan.config.positions import PathPart, Positions
from fleetplan.errors import Diagnostic


def describe(value: Any) -> str:
    """A short, typed description of a YAML value for 'found ...'."""
    if value is None:
        return "null (an empty value)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}" if value else "an empty string"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes reachable through Optional, Annotated, tuple[X, ...] and dict[str, X]."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        found = []
        for arg in typing.get_args(annotation):
            found.extend(_unwrap(arg))
        return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def model_at(root: type[BaseModel], path: Sequence[PathPart]) -> type[BaseModel] | None:
    """The model class that validates the mapping at `path`, if there is one."""
    current: type[BaseModel] | None = root
    for part in path:
        if current is None:
            return None
        if isinstance(part, int):
            continue  # list items and dict values keep the element model found below
        field = next((f for name, f in current.model_fields.items()
                      if (f.alias or name) == part), None)
        if field is None:
            return None
        models = _unwrap(field.annotation)
        current = models[0] if models else None
    return current


def _allowed_keys(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def nearest(word: str, choices: Sequence[str]) -> str | None:
    """The closest choice to `word`, case-insensitively, or None."""
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return lowered[word.lower()]
    camel = to_camel(word)
    if camel in choices:
        return camel
    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def _field_description(root: type[BaseModel], path: Sequence[PathPart]) -> str | None:
    parent = model_at(root, path[:-1])
    if parent is None:
        return None
    for name, f in parent.model_fields.items():
        if (f.alias or name) == path[-1]:
            return f.description
    return None


def _explain_one(root: type[BaseModel], err: Any, positions: Positions) -> Diagnostic:
    kind: str = err["type"]
    raw_loc = tuple(err["loc"])
    is_key = "[key]" in raw_loc
    loc: tuple[PathPart, ...] = tuple(p for p in raw_loc if p != "[key]")
    value = err.get("input")
    ctx = err.get("ctx") or {}
    hint: str | None = None
    where = positions.value(loc)
    found = describe(value)
    if kind == "missing":
        summary = f"missing required field {loc[-1]!r}"
        where = positions.key(loc)
        desc = _field_description(root, loc)
        hint = f"add '{loc[-1]}:' here{': ' + desc if desc else ''}"
    elif kind == "extra_forbidden":
        where = positions.key(loc)
        allowed = _allowed_keys(model_at(root, loc[:-1]))
        summary = f"unknown field {loc[-1]!r}"
        guess = nearest(str(loc[-1]), allowed)
        if guess:
            hint = f"did you mean {guess!r}?"
        elif allowed:
            hint = "allowed here: " + ", ".join(allowed)
    elif kind == "fleet_value":
        summary = err["msg"]
        hint = ctx.get("hint")
    elif kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "")
        summary = f"expected {expected}, found {found}"
        choices = [c.strip() for c in expected.replace(" or ", ",").split(",") if c.strip()]
        guess = nearest(str(value), choices) if isinstance(value, str) else None
        hint = f"did you mean {guess!r}?" if guess else None
    elif kind in ("string_type", "str_type"):
        summary = f"expected a string, found {found}"
        if isinstance(value, (bool | int | float, datetime.date)):
            hint = "quote the value to make it text"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        summary = f"expected a mapping, found {found}"
        hint = "write 'key: value' pairs indented under this key"
    elif kind in ("tuple_type", "list_type"):
        summary = f"expected a list, found {found}"
        hint = "write items as '- item' lines or [a, b]"
    elif kind in ("bool_type", "bool_parsing"):
        summary = f"expected true or false, found {found}"
        hint = "write true or false without quotes"
    elif kind == "path_type":
        summary = f"expected a path, found {found}"
    else:
        summary = f"{err['msg'][:1].lower()}{err['msg'][1:]}, found {found}"
    if is_key:
        where = positions.key(loc)
        summary = f"key {loc[-1]!r}: {summary}"
    return Diagnostic(summary, where, hint=hint)


def explain_validation_error(root: type[BaseModel], error: ValidationError,
                             positions: Positions) -> list[Diagnostic]:
    """One diagnostic per distinct problem, in file order."""
    seen: set[tuple[str, str]] = set()
    out = []
    for err in error.errors(include_url=False):
        diag = _explain_one(root, err, positions)
        mark = (diag.location.path if diag.location else "", diag.summary)
        if mark not in seen:
            seen.add(mark)
            out.append(diag)
    return sorted(out, key=lambda d: (d.location.line or 0, d.location.column or 0) if d.location else (0, 0))
