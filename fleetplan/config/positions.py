"""Field paths and their positions in the YAML file.

A field path is a tuple of mapping keys and list indexes, rendered `spec.members[1].name`.
`Positions.value(path)` gives the 1-based line and column of the value at `path`, and
`Positions.key(path)` of its key; a path that does not exist in the file (a missing field, a
default, a key that came in through a `<<` merge) falls back to the nearest ancestor that does,
so every diagnostic has a position.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from fleetplan.errors import Location

PathPart = str | int
FieldPath = tuple[PathPart, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_/-]+$")


def render_path(path: Sequence[PathPart]) -> str:
    """`("spec", "members", 1, "name")` -> `spec.members[1].name`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.match(str(part)):
            out += f"[{json.dumps(str(part))}]"  # a key with spaces or dots must stay readable
        else:
            out += f".{part}" if out else str(part)
    return out


class Positions:
    """Looks up positions in one ruamel round-trip tree."""

    def __init__(self, file: str, tree: Any) -> None:
        self.file = file
        self.tree = tree

    def _walk(self, path: Sequence[PathPart]) -> tuple[int, tuple[int, int] | None, tuple[int, int] | None]:
        """How many parts exist, and the (key, value) 0-based positions of the last one found."""
        node = self.tree
        key_pos: tuple[int, int] | None = None
        value_pos: tuple[int, int] | None = (0, 0)
        for depth, part in enumerate(path):
            if isinstance(node, CommentedMap) and not isinstance(part, bool) and part in node:
                data = node.lc.data.get(part)
                if data is None:  # merged in through `<<`: stay at the merging mapping
                    return depth, key_pos, value_pos
                key_pos, value_pos = (data[0], data[1]), (data[2], data[3])
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                data = node.lc.data.get(part)
                if data is None:
                    return depth, key_pos, value_pos
                key_pos = value_pos = (data[0], data[1])
                node = node[part]
            else:
                return depth, key_pos, value_pos
        return len(path), key_pos, value_pos

    def exists(self, path: Sequence[PathPart]) -> bool:
        return self._walk(path)[0] == len(path)

    def value(self, path: Sequence[PathPart]) -> Location:
        """Where the value at `path` is (or the nearest ancestor's value)."""
        _, _, pos = self._walk(path)
        return self._location(pos, path)

    def key(self, path: Sequence[PathPart]) -> Location:
        """Where the key of `path` is written (or the nearest ancestor's)."""
        _, pos, value_pos = self._walk(path)
        return self._location(pos or value_pos, path)

    def _location(self, pos: tuple[int, int] | None, path: Sequence[PathPart]) -> Location:
        if pos is None:
            return Location(self.file, 1, 1, render_path(path))
        return Location(self.file, pos[0] + 1, pos[1] + 1, render_path(path))
