"""Compare a live object with its server-side-apply dry-run result on fleetplan-managed fields.

Why through managedFields: a dry-run result already contains server defaults and webhook mutations,
and other controllers' fields (a webhook's caBundle, an HPA's replicas) stay as they are live. By
projecting both objects onto the union of the field sets owned by manager `fleetplan` (live: what
we set last time, so removals show; dry-run: what we would set now) the comparison sees exactly
the fields an apply would change and nothing another controller owns.

Invariants: pure; never returns a sensitive value (paths under `sensitive_paths`, and all of a
Secret's `data`/`stringData`, are masked); output is sorted by path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fleetplan.diff.changes import ABSENT, SENSITIVE, FieldChange

MANAGER = "fleetplan"
FieldSet = Mapping[str, Any]  # the decoded fieldsV1 trie
# Server-owned metadata that never counts as a change, even if a field set claims it.
_IGNORED = {
    "metadata.managedFields",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.uid",
    "metadata.selfLink",
}


def managed_fields(obj: Mapping[str, Any] | None, manager: str = MANAGER) -> FieldSet:
    """The merged fieldsV1 trie of every Apply entry by `manager` on `obj`."""
    merged: dict[str, Any] = {}
    for entry in (obj or {}).get("metadata", {}).get("managedFields") or ():
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            _merge(merged, entry.get("fieldsV1") or {})
    return merged


def project(obj: Any, fields: FieldSet) -> Any:
    """The part of `obj` that `fields` covers; lists keyed by `k:`/`v:`/`i:` become key->item dicts."""
    if not isinstance(fields, Mapping) or not fields or set(fields) == {"."}:
        return obj
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, sub in fields.items():
            if key.startswith("f:") and key[2:] in obj:
                out[key[2:]] = project(obj[key[2:]], sub)
        return out
    if isinstance(obj, list):
        out_list: dict[str, Any] = {}
        for key, sub in fields.items():
            item = _find_item(obj, key)
            if item is not None:
                out_list[_label(key)] = project(item, sub)
        return out_list
    return obj


def compare(
    live: Mapping[str, Any] | None,
    merged: Mapping[str, Any],
    *,
    sensitive_paths: Iterable[str] = (),
    ignore_paths: Iterable[str] = (),
) -> tuple[FieldChange, ...]:
    """Changes an apply would make to `live`, given the dry-run result `merged`."""
    fields: dict[str, Any] = {}
    _merge(fields, managed_fields(live))
    _merge(fields, managed_fields(merged))
    before = project(_plain(live or {}), fields) if fields else {}
    after = project(_plain(merged), fields) if fields else _plain(merged)
    return diff_values(
        before, after, sensitive_paths=_sensitive(merged, sensitive_paths), ignore_paths=ignore_paths
    )


def diff_values(
    before: Any, after: Any, *, sensitive_paths: Iterable[str] = (), ignore_paths: Iterable[str] = ()
) -> tuple[FieldChange, ...]:
    """Leaf-level changes between two JSON-like values, masked and filtered."""
    sensitive, ignored = tuple(sensitive_paths), tuple(ignore_paths) + tuple(_IGNORED)
    if isinstance(before, Mapping) and not before and isinstance(after, Mapping):
        return _all_added(after, sensitive, ignored)
    from deepdiff import DeepDiff  # here: a converged or new fleet never needs it (~50 ms to import)

    result = DeepDiff(
        before, after, ignore_order=False, view="tree", verbose_level=2, threshold_to_diff_deeper=0
    )
    changes: dict[str, FieldChange] = {}
    for items in result.values():
        for item in items:
            path = _dotted(item.path(output_format="list"))
            if _under(path, ignored):
                continue
            old = ABSENT if _missing(item.t1) else item.t1
            new = ABSENT if _missing(item.t2) else item.t2
            if _under(path, sensitive):
                old = ABSENT if old is ABSENT else SENSITIVE
                new = ABSENT if new is ABSENT else SENSITIVE
                if old == new:  # both masked: the value changed, say so without showing it
                    new = SENSITIVE + " (changed)"
            changes[path] = FieldChange(path, old, new)
    return tuple(changes[p] for p in sorted(changes))


def _all_added(after: Mapping[str, Any], sensitive: tuple[str, ...], ignored: tuple[str, ...]
               ) -> tuple[FieldChange, ...]:
    """What `DeepDiff({}, after)` reports, without its cost (a create's plan lists every resource
    this way): one addition per top-level key, masked when the key is sensitive."""
    changes = []
    for key in sorted(after, key=str):
        path = str(key)
        if _under(path, ignored):
            continue
        new = after[key]
        if _under(path, sensitive):  # masked exactly as `diff_values` masks DeepDiff's items
            new = ABSENT if new is ABSENT else SENSITIVE
            if new == ABSENT:
                new = SENSITIVE + " (changed)"
        changes.append(FieldChange(path, ABSENT, new))
    return tuple(changes)


def _sensitive(obj: Mapping[str, Any], paths: Iterable[str]) -> tuple[str, ...]:
    extra = ("data", "stringData") if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1" else ()
    return (*paths, *extra)


def _plain(obj: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(obj, default=str))


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, Mapping):
            _merge(into.setdefault(key, {}), value)
        else:
            into.setdefault(key, value)


def _find_item(items: list[Any], key: str) -> Any:
    if key.startswith("k:"):
        wanted = json.loads(key[2:])
        return next(
            (i for i in items if isinstance(i, Mapping) and all(i.get(k) == v for k, v in wanted.items())),
            None,
        )
    if key.startswith("v:"):
        wanted = json.loads(key[2:])
        return next((i for i in items if i == wanted), None)
    if key.startswith("i:"):
        index = int(key[2:])
        return items[index] if index < len(items) else None
    return None


def _label(key: str) -> str:
    if key.startswith("k:"):
        return "[" + ",".join(f"{k}={v}" for k, v in json.loads(key[2:]).items()) + "]"
    return f"[{key[2:]}]"


def _dotted(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        text = str(part)
        if isinstance(part, int):
            out += f"[{part}]"
        elif text.startswith("["):
            out += text
        else:
            out += ("." if out else "") + text
    return out


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in prefixes)


def _missing(value: Any) -> bool:
    return type(value).__name__ == "NotPresent"
