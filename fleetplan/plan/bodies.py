"""Helpers over desired bodies that hold `Ref`s: hashing, path lookups, and Ref substitution.

Pure. A body is a JSON-like mapping whose leaves may be `Ref`s; paths are dotted with `[i]` for
list items. The canonical JSON form encodes a Ref as `{"$ref": {...}}`, so hashes and plan files
agree on what a body is.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from fleetplan.addrs import Address
from fleetplan.stacks.desired import Ref, Template

_MISSING = object()


def encode(value: Any) -> Any:
    """JSON-safe form: Refs become `{"$ref": {...}}`, Templates `{"$template": {...}}`."""
    if isinstance(value, Ref):
        return {
            "$ref": {
                "source": str(value.source),
                "output": value.output,
                "sensitive": value.sensitive,
                "transform": value.transform,
            }
        }
    if isinstance(value, Template):
        return {
            "$template": {
                "text": value.text,
                "transform": value.transform,
                "sensitive": value.sensitive,
                "refs": [[name, encode(ref)] for name, ref in value.refs],
            }
        }
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    if isinstance(value, Mapping):
        if set(value) == {"$ref"}:
            ref = value["$ref"]
            return Ref(
                Address.parse(ref["source"]),
                ref["output"],
                bool(ref.get("sensitive", True)),
                ref.get("transform"),
            )
        if set(value) == {"$template"}:
            tpl = value["$template"]
            return Template(
                tpl["text"],
                tuple((name, decode(ref)) for name, ref in tpl["refs"]),
                tpl.get("transform"),
                bool(tpl.get("sensitive", True)),
            )
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def body_hash(body: Mapping[str, Any] | None) -> str:
    text = json.dumps(encode(body or {}), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


Unknown = Ref | Template  # a leaf whose value only an apply can produce


def ref_paths(value: Any, prefix: str = "") -> Iterator[tuple[str, Ref | Template]]:
    if isinstance(value, Ref | Template):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from ref_paths(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from ref_paths(item, f"{prefix}[{i}]")


def lookup(obj: Any, path: str) -> Any:
    """The value at a dotted path (keys may not contain dots; use `[i]` for list items), or None."""
    current = obj
    for part in _split(path):
        if isinstance(part, int):
            current = current[part] if isinstance(current, list) and part < len(current) else None
        else:
            current = current.get(part) if isinstance(current, Mapping) else None
        if current is None:
            return None
    return current


def substitute(value: Any, resolve: Any) -> Any:
    """Replace every Ref/Template by `resolve(leaf)`; a result of `DROP` removes the key."""
    if isinstance(value, Ref | Template):
        return resolve(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            new = substitute(item, resolve)
            if new is not DROP:
                out[key] = new
        return out
    if isinstance(value, list | tuple):
        return [v for v in (substitute(i, resolve) for i in value) if v is not DROP]
    return value


DROP = _MISSING


def transform(value: str, how: str | None) -> str:
    if how is None:
        return value
    if how == "base64":
        return base64.b64encode(value.encode()).decode()
    raise ValueError(f"unknown Ref transform {how!r}")


def _split(path: str) -> Iterator[str | int]:
    for chunk in path.split("."):
        while "[" in chunk:
            head, _, rest = chunk.partition("[")
            if head:
                yield head
            index, _, chunk = rest.partition("]")
            yield int(index) if index.isdigit() else index
        if chunk:
            yield chunk


def sources(leaf: Ref | Template) -> tuple[Address, ...]:
    if isinstance(leaf, Ref):
        return (leaf.source,)
    return tuple(ref.source for _, ref in leaf.refs)
