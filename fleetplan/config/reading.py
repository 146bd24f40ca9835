"""Reading one YAML document from disk with positions, refusing what is not a sane config file.

`read_yaml_file` returns the ruamel round-trip tree (which remembers line and column of every key
and item) and a plain-Python copy of it for validation. Every failure is a `ConfigError` whose
diagnostic names file:line:column: a file that is missing, too large (refused by size before it
is read), not UTF-8 text, empty, more than one document, YAML syntax (tabs get their own hint),
duplicate keys, tags, or a document whose alias expansion is too big. Anchors, aliases and `<<`
merge keys work; merged keys are located at the mapping that merges them.
"""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from fleetplan.errors import ConfigError, Diagnostic, Location

MAX_BYTES = 10 * 1024 * 1024  # a 1,000-cluster fleet is about 0.3 MB
MAX_NODES = 200_000  # bounds alias expansion ("billion laughs")


@dataclass(frozen=True)
class YamlDocument:
    """A parsed document: its file, the positioned ruamel tree, and the same data as plain Python."""

    file: Path
    tree: Any
    data: Any


def _error(file: Path, summary: str, line: int | None = None, column: int | None = None,
           hint: str | None = None) -> ConfigError:
    return ConfigError([Diagnostic(summary, Location(str(file), line, column), hint=hint)])


def _decode(file: Path, raw: bytes) -> str:
    if b"\x00" in raw:
        offset = raw.index(b"\x00")
        line = raw.count(b"\n", 0, offset) + 1
        column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
        raise _error(file, "this is a binary file, not YAML text (found a NUL byte)", line, column,
                     "pass the fleet.yaml file with -f")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise _error(file, f"this file is not UTF-8 text (byte 0x{raw[err.start]:02x})", line, column,
                     "save it as UTF-8") from None
    return text.removeprefix("\ufeff")


def _syntax_error(file: Path, err: MarkedYAMLError) -> ConfigError:
    mark = err.problem_mark or err.context_mark
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    problem = (err.problem or "").strip()
    context = (err.context or "").strip()
    hint = None
    if "duplicate key" in problem:
        key = problem.split('"')[1] if '"' in problem else "?"
        summary = f"duplicate key {key!r}"
        hint = "each key may appear once in a mapping; merge the two entries"
    elif "\\t" in problem or "\t" in problem:
        summary = "a tab character; YAML indentation must use spaces"
        hint = "replace tabs with spaces"
    elif "another document" in problem or "single document" in context:
        summary = "more than one YAML document; a fleet file holds exactly one"
        hint = "remove the '---' separator and keep one Fleet per file"
    else:
        summary = f"YAML syntax error: {context + ': ' if context else ''}{problem}"
        hint = "check the indentation and quoting on this line and the one before"
    return _error(file, " ".join(summary.split()), line, column, hint)


class _Plainer:
    """Copies a ruamel tree into plain dict/list/str/int/float/bool/None, counting nodes."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.count = 0

    def copy(self, node: Any, where: tuple[int, int] = (0, 0)) -> Any:
        """Plain copy of `node`, which sits at 0-based `where` (for the messages)."""
        self.count += 1
        if self.count > MAX_NODES:
            raise _error(self.file, f"the document expands to more than {MAX_NODES} nodes",
                         where[0] + 1, where[1] + 1, "anchors and aliases are expanded; use fewer of them")
        if isinstance(node, TaggedScalar):
            raise _error(self.file, f"YAML tag {node.tag.value!r} is not supported", where[0] + 1,
                         where[1] + 1, "remove the tag; fleet.yaml uses plain YAML values")
        if isinstance(node, dict):
            return {self._key(k): self.copy(v, self._at(node, k, where)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.copy(v, self._at(node, i, where)) for i, v in enumerate(node)]
        if isinstance(node, bool) or node is None:
            return node
        if isinstance(node, int):
            return bool(node) if type(node).__name__ == "ScalarBoolean" else int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, str):
            return str(node)
        if isinstance(node, datetime.date):
            return node  # pydantic reports "found a date" at the right path
        return str(node)

    @staticmethod
    def _at(node: Any, key: Any, default: tuple[int, int]) -> tuple[int, int]:
        data = getattr(getattr(node, "lc", None), "data", {}).get(key)
        if not data:
            return default  # merged in, or a plain copy made by alias expansion
        return (data[2], data[3]) if len(data) == 4 else (data[0], data[1])

    def _key(self, key: Any) -> Any:
        if isinstance(key, (dict, list)):
            raise _error(self.file, "a mapping key must be a plain value, not a mapping or list")
        return key if isinstance(key, (str, int, float, bool)) or key is None else str(key)


def read_yaml_file(file: Path, *, what: str = "fleet file") -> YamlDocument:
    """Read and parse `file`; raises ConfigError (with a location) for anything not one YAML doc."""
    return read_yaml_documents(file, what=what, single=True)[0]


def read_yaml_documents(file: Path, *, what: str, single: bool = False) -> list[YamlDocument]:
    """Every document in `file` (mappings only; at least one); `single` refuses more than one."""
    try:
        size = file.stat().st_size
        if file.is_dir():
            raise _error(file, f"this is a directory, not a {what}", hint="name the YAML file itself")
        if size > MAX_BYTES:
            raise _error(file, f"the {what} is {size} bytes; the limit is {MAX_BYTES} bytes",
                         hint="is this the right file?")
        raw = file.read_bytes()
    except FileNotFoundError:
        raise _error(file, f"{what} not found", hint="pass the path with -f FILE") from None
    except PermissionError:
        raise _error(file, f"no permission to read the {what}") from None
    except OSError as err:
        raise _error(file, f"cannot read the {what}: {err.strerror or err}") from None
    text = _decode(file, raw)
    yaml = YAML(typ="rt")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            docs = list(yaml.load_all(text))
    except MarkedYAMLError as err:
        raise _syntax_error(file, err) from None
    except ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        code = ord(err.character) if isinstance(err.character, str) else err.character
        raise _error(file, f"a control character (0x{code:02x}) that YAML does not allow", line, column,
                     "remove it; is this the right file?") from None
    except YAMLError as err:
        raise _error(file, "YAML error: " + " ".join(str(err).split())) from None
    except RecursionError:
        raise _error(file, "the document is nested too deeply") from None
    docs = [d for d in docs if d is not None]
    if single and len(docs) > 1:
        line = _second_document_line(text)
        raise _error(file, f"{len(docs)} YAML documents; a {what} holds exactly one", line, 1,
                     "remove the '---' separator and keep one document per file")
    if not docs:
        raise _error(file, f"the {what} is empty", 1, 1,
                     "start from an example in examples/ (apiVersion, kind, metadata, spec)")
    out = []
    for tree in docs:
        if not isinstance(tree, CommentedMap):
            found = "a list" if isinstance(tree, CommentedSeq) else f"the value {str(tree)[:30]!r}"
            raise _error(file, f"expected a mapping at the top level, found {found}", 1, 1,
                         "a YAML file here holds 'key: value' pairs, starting with apiVersion")
        try:
            out.append(YamlDocument(file, tree, _Plainer(file).copy(tree)))
        except RecursionError:
            raise _error(file, "the document is nested too deeply") from None
    return out


def _second_document_line(text: str) -> int:
    starts = [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("---")]
    content_seen = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("---") and content_seen:
            return number
        if line.strip() and not line.lstrip().startswith("#") and not line.startswith("---"):
            content_seen = True
    return starts[-1] if starts else 1
