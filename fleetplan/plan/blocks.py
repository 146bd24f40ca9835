"""A step's field changes as nested, Terraform-like blocks for the human plan view.

`FieldChange`s arrive as dotted paths; a create holds whole subtrees (`spec = {...}`), an update
holds leaves. This module folds both into one tree and prints it one attribute per line:

      + metadata {
          + name      = "settings"
        }
      ~ data {
          ~ color = "blue" -> "green"
        }

Invariants:
- Pure, deterministic text; only values the plan already holds are printed, so masked markers
  (`(sensitive value)`, `(known after apply)`) stay masked.
- Paths are split with the desired body as a guide, because a dotted path cannot tell the key
  `app.kubernetes.io/name` from three nested keys; where the body has no answer the rest of the
  path stays one label.
- Large values are summarised, never silently dropped: a subtree over `MAX_BLOCK_LINES` lines, a
  single-line string over `MAX_STRING` characters or a text over `MAX_TEXT_LINES` lines becomes
  `(3 versions, 42 KiB, collapsed)`, and `Rendered.collapsed` tells the caller to point at the JSON
  view, which is always complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetplan.diff.changes import ABSENT, KNOWN_AFTER_APPLY, SENSITIVE, SENSITIVE_KNOWN_AFTER_APPLY, FieldChange

MAX_BLOCK_LINES = 100
MAX_LIST_BYTES = 4096
MAX_STRING = 160
MAX_TEXT_LINES = 20
MARKERS = frozenset({SENSITIVE, KNOWN_AFTER_APPLY, SENSITIVE_KNOWN_AFTER_APPLY, SENSITIVE + " (changed)"})
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Leaf:
    before: Any
    after: Any


@dataclass
class Branch:
    children: dict[str, Branch | Leaf] = field(default_factory=dict)


@dataclass
class Rendered:
    lines: list[str]
    collapsed: bool


def render_changes(
    changes: tuple[FieldChange, ...], body: Mapping[str, Any] | None, indent: int, paint: Any
) -> Rendered:
    """The lines for `changes` at `indent` spaces; `paint(text, ansi_code)` colours symbols."""
    printer = _Printer(paint)
    lines = printer.branch(build_tree(changes, body), body, indent, top=True)
    return Rendered(lines, printer.collapsed)


def build_tree(changes: tuple[FieldChange, ...], body: Mapping[str, Any] | None) -> Branch:
    root = Branch()
    for change in sorted(changes, key=lambda c: len(c.path)):
        _insert(root, split_path(change.path, body), Leaf(change.before, change.after))
    return root


def split_path(path: str, body: Any) -> list[str]:
    """Display labels for `path`: dict keys, with list-item selectors (`[name=app]`) kept on their key."""
    labels: list[str] = []
    node: Any = body
    rest = path
    while rest:
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                labels.append(rest)
                break
            selector, rest = rest[: end + 1], rest[end + 1 :]
            if labels:
                labels[-1] += selector
            else:
                labels.append(selector)
            node = _item(node, selector)
            continue
        rest = rest.removeprefix(".")
        if node is None and body is None:  # no guide at all: split naively
            key = re.split(r"[.\[]", rest, maxsplit=1)[0]
        elif isinstance(node, Mapping):
            fits = [k for k in node if isinstance(k, str) and re.match(re.escape(k) + r"(?:$|[.\[])", rest)]
            key = max(fits, key=len) if fits else rest
        else:
            key = rest
        labels.append(key)
        rest = rest[len(key) :]
        node = node.get(key) if isinstance(node, Mapping) else None
    return labels


def _item(node: Any, selector: str) -> Any:
    if not isinstance(node, list):
        return None
    inner = selector[1:-1]
    if inner.isdigit():
        index = int(inner)
        return node[index] if index < len(node) else None
    pairs = [p.split("=", 1) for p in inner.split(",")]
    if all(len(p) == 2 for p in pairs):
        for item in node:
            if isinstance(item, Mapping) and all(str(item.get(k)) == v for k, v in pairs):
                return item
    return None


def _insert(root: Branch, labels: list[str], leaf: Leaf) -> None:
    node = root
    for depth, label in enumerate(labels):
        last = depth == len(labels) - 1
        child = node.children.get(label)
        if last:
            if child is None:
                node.children[label] = leaf
            return
        if isinstance(child, Leaf):
            if not isinstance(child.after, Mapping) or child.before is not ABSENT:
                return  # a masked or scalar value already covers this path
            child = Branch({k: Leaf(ABSENT, v) for k, v in child.after.items()})
            node.children[label] = child
        elif child is None:
            child = node.children[label] = Branch()
        node = child


def _symbol(node: Branch | Leaf) -> str:
    kinds = set(_kinds(node))
    return "+" if kinds == {"+"} else "-" if kinds == {"-"} else "~"


def _kinds(node: Branch | Leaf) -> list[str]:
    if isinstance(node, Leaf):
        return ["+" if node.before is ABSENT else "-" if node.after is ABSENT else "~"]
    return [k for child in node.children.values() for k in _kinds(child)]


_COLOUR = {"+": "32", "-": "31", "~": "33"}


@dataclass
class _Single:
    """One `label = text` line; runs of these are aligned on `=`."""

    symbol: str
    label: str
    text: str


@dataclass
class _Multi:
    """A nested block, and the one-line summary that replaces it when collapsed."""

    symbol: str
    label: str
    lines: list[str]
    summary: str


class _Printer:
    def __init__(self, paint: Any) -> None:
        self.paint = paint
        self.collapsed = False

    def mark(self, symbol: str) -> str:
        return str(self.paint(symbol, _COLOUR[symbol]))

    def branch(self, node: Branch, body: Any, indent: int, *, top: bool = False) -> list[str]:
        order = list(body) if isinstance(body, Mapping) else []
        keys = sorted(node.children, key=lambda k: (order.index(k) if k in order else len(order), k))
        entries: list[_Single | _Multi] = []
        for key in keys:
            child = node.children[key]
            sub_body = body.get(key) if isinstance(body, Mapping) else None
            if isinstance(child, Branch):
                inner = self.branch(child, sub_body, indent + 4)
                count = len(_kinds(child))
                summary = f"{count} change{'s' if count != 1 else ''}"
                entries.append(_Multi(_symbol(child), _key(key), [" {", *inner, "}"], summary))
            else:
                entries.append(self.leaf(child, _key(key), indent))
        return self.lay_out(entries, indent, limit=None if top else MAX_BLOCK_LINES)

    def lay_out(
        self, entries: list[_Single | _Multi], indent: int, suffix: str = "", limit: int | None = MAX_BLOCK_LINES
    ) -> list[str]:
        """Collapse the largest blocks first until the whole fits `limit`, then print with aligned `=`."""
        def total() -> int:
            return sum(len(e.lines) if isinstance(e, _Multi) else 1 for e in entries)

        while limit is not None and total() > limit:
            multis = [(len(e.lines), i, e) for i, e in enumerate(entries) if isinstance(e, _Multi)]
            if not multis:
                break
            _, largest, big = max(multis, key=lambda m: (m[0], m[1]))
            entries[largest] = _Single(big.symbol, big.label, f"({big.summary}, collapsed)")
            self.collapsed = True
        pad, lines, run = " " * indent, [], []
        for entry in [*entries, None]:
            if isinstance(entry, _Single):
                run.append(entry)
                continue
            width = max((len(e.label) for e in run), default=0)
            for single in run:
                label = single.label.ljust(width) + " = " if single.label else ""
                lines.append(f"{pad}{self.mark(single.symbol)} {label}{single.text}{suffix}")
            run = []
            if entry is not None:
                head = f"{pad}{self.mark(entry.symbol)} {entry.label}".rstrip()
                opener, closer = entry.lines[0], entry.lines[-1]
                lines.extend([f"{head}{opener}", *entry.lines[1:-1], f"{pad}  {closer}{suffix}"])
        return lines

    def leaf(self, leaf: Leaf, label: str, indent: int) -> _Single | _Multi:
        if leaf.before is ABSENT or leaf.after is ABSENT:
            symbol = "+" if leaf.before is ABSENT else "-"
            return self.value(symbol, label, leaf.after if symbol == "+" else leaf.before, indent)
        return _Single("~", label, f"{self.inline(leaf.before)} -> {self.inline(leaf.after)}")

    def value(self, symbol: str, label: str, value: Any, indent: int) -> _Single | _Multi:
        """A whole value added or removed: dicts and lists nest, scalars sit on one line.

        A `_Multi`'s `lines` hold the opener suffix first and the closer last, so `lay_out` can
        put the label in front and indent the closer."""
        sized = isinstance(value, (Mapping, list)) and value
        summary = _size(value, _noun(label) if isinstance(value, list) else "keys") if sized else ""
        if isinstance(value, Mapping) and value:
            inner = self.branch(Branch({k: _whole(symbol, v) for k, v in value.items()}), value, indent + 4)
            return self.fit(symbol, label, [" {", *inner, "}"], summary)
        if isinstance(value, list) and value and not _short_scalars(value):
            items = [self.value(symbol, "", item, indent + 4) for item in value]
            inner = self.lay_out(items, indent + 4, suffix=",")  # may collapse entries in place
            bulky = len(json.dumps(value, default=str)) > MAX_LIST_BYTES
            lost = any(
                isinstance(i, _Single) and isinstance(v, (Mapping, list)) and v
                for i, v in zip(items, value, strict=True)
            )
            if bulky or lost:
                # An anonymous item collapsed on its own says nothing: collapse the whole list.
                self.collapsed = True
                return _Single(symbol, label, f"({summary}, collapsed)")
            return self.fit(symbol, label, [" = [" if label else " [", *inner, "]"], summary)
        if isinstance(value, str) and "\n" in value and value not in MARKERS:
            text = value.rstrip("\n").split("\n")
            if len(text) <= MAX_TEXT_LINES and len(value) <= MAX_STRING * MAX_TEXT_LINES:
                shown = [f"{' ' * indent}      {line}".rstrip() for line in text]
                lines = [" = <<-EOT" if label else " <<-EOT", *shown, "EOT"]
                return _Multi(symbol, label, lines, f"text, {len(text)} lines, {_bytes(len(value.encode()))}")
        return _Single(symbol, label, self.inline(value))

    def fit(self, symbol: str, label: str, lines: list[str], summary: str) -> _Single | _Multi:
        if len(lines) - 2 > MAX_BLOCK_LINES:
            self.collapsed = True
            return _Single(symbol, label, f"({summary}, collapsed)")
        return _Multi(symbol, label, lines, summary)

    def inline(self, value: Any) -> str:
        if isinstance(value, str) and value in MARKERS:
            return value
        if isinstance(value, str) and ("\n" in value or len(value) > MAX_STRING):
            self.collapsed = True
            lines = value.count("\n") + (0 if value.endswith("\n") else 1)
            shape = f"text, {lines} lines" if "\n" in value else "string"
            return f"({shape}, {_bytes(len(value.encode()))}, collapsed)"
        text = json.dumps(value, sort_keys=True)
        if len(text) > MAX_STRING:
            self.collapsed = True
            return f"({_size(value, 'keys' if isinstance(value, Mapping) else 'items')}, collapsed)"
        return text


def _whole(symbol: str, value: Any) -> Leaf:
    return Leaf(ABSENT, value) if symbol == "+" else Leaf(value, ABSENT)


def _short_scalars(value: list[Any]) -> bool:
    return all(not isinstance(v, (Mapping, list)) for v in value) and len(json.dumps(value)) <= MAX_STRING // 2


def _key(label: str) -> str:
    head, bracket, tail = label.partition("[")
    shown = head if _BARE_KEY.match(head) or not head else json.dumps(head)
    return shown + bracket + tail


def _noun(label: str) -> str:
    word = label.rsplit("[", 1)[0].strip('"')
    return word if word.endswith("s") and _BARE_KEY.match(word) else "items"


def _size(value: Any, noun: str) -> str:
    count = len(value)
    if count == 1:
        noun = "key" if noun == "keys" else "item" if noun == "items" else noun.removesuffix("s")
    return f"{count} {noun}, {_bytes(len(json.dumps(value, default=str)))}"


def _bytes(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"
