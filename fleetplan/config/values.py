"""The constrained value types of fleet.yaml, each with an error message a user can act on.

Every type here is an `Annotated` pydantic type whose validator raises `PydanticCustomError`
with a plain-language message and, in its context, a `hint`; `explaining.py` turns those into
diagnostics. Each carries its JSON Schema (pattern, examples) so the published schema and the
validator agree.

Paths: `~` and `${ENV}` are expanded, then a relative path is resolved against the directory of
the fleet file (the `base_dir` in the validation context; the working directory without one) and
stored absolute. An unset `${ENV}` is an error, not an empty string.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

from fleetplan.config.durations import DURATION_PATTERN, parse_duration

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
VERSION_PATTERN = r"^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"
SHA256_PATTERN = r"^(sha256:)?[0-9a-f]{64}$"
API_SERVER_PATTERN = r"^https://[^\s/]+(:[0-9]+)?(/.*)?$"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _fail(message: str, hint: str | None = None) -> PydanticCustomError:
    return PydanticCustomError("fleet_value", message, {"hint": hint} if hint else None)


def _check_dns_label(value: str) -> str:
    if len(value) > 63:
        raise _fail(f"{value!r} is {len(value)} characters; a DNS-1123 label has at most 63",
                    "use a shorter name")
    if not re.match(DNS_LABEL_PATTERN, value):
        suggestion = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-") or "name"
        raise _fail(f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
                    "starting and ending with a letter or digit)", f"for example {suggestion!r}")
    return value


def _check_duration(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as err:
        raise _fail(str(err), "units are d, h, m and s, largest first, e.g. 1h30m") from None
    return value


def _check_version(value: str) -> str:
    if not re.match(VERSION_PATTERN, value):
        fixed = value if value.startswith("v") else f"v{value}"
        hint = f"did you mean {fixed!r}?" if re.match(VERSION_PATTERN, fixed) else "for example v2.7.0"
        raise _fail(f"{value!r} is not a release version like v2.7.0", hint)
    return value


def _check_sha256(value: str) -> str:
    if not re.match(SHA256_PATTERN, value):
        raise _fail(f"{value!r} is not a sha256 digest (64 lower-case hex digits, optional 'sha256:' prefix)",
                    "compute it with `sha256sum FILE`")
    return value.removeprefix("sha256:")


def _check_api_server(value: str) -> str:
    if not re.match(API_SERVER_PATTERN, value):
        hint = "API servers are reached over TLS" if value.startswith("http://") else "for example https://north.example:6443"
        raise _fail(f"{value!r} is not an https:// URL of an API server", hint)
    return value.rstrip("/")


def expand_path_text(text: str) -> str:
    """`~` and `${ENV}` expanded; raises ValueError naming an unset variable."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ValueError(name)
        return os.environ[name]

    return os.path.expanduser(_ENV_REF.sub(substitute, text))


def _resolve_path(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, str):
        return value  # the Path validator reports the wrong type
    if not value.strip():
        raise _fail("a path must not be empty")
    try:
        expanded = expand_path_text(value)
    except ValueError as err:
        raise _fail(f"environment variable {err.args[0]} in {value!r} is not set",
                    f"export {err.args[0]} or write the path out") from None
    base = (info.context or {}).get("base_dir") if info.context else None
    path = Path(expanded)
    if not path.is_absolute():
        path = Path(base or os.getcwd()) / path
    return Path(os.path.normpath(path))


DnsLabel = Annotated[str, AfterValidator(_check_dns_label),
                     WithJsonSchema({"type": "string", "pattern": DNS_LABEL_PATTERN, "maxLength": 63})]
Duration = Annotated[str, AfterValidator(_check_duration),
                     WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN,
                                     "examples": ["24h", "1h30m"]})]
Version = Annotated[str, AfterValidator(_check_version),
                    WithJsonSchema({"type": "string", "pattern": VERSION_PATTERN, "examples": ["v2.7.0"]})]
Sha256 = Annotated[str, AfterValidator(_check_sha256),
                   WithJsonSchema({"type": "string", "pattern": SHA256_PATTERN})]
ApiServer = Annotated[str, AfterValidator(_check_api_server),
                      WithJsonSchema({"type": "string", "pattern": API_SERVER_PATTERN,
                                      "examples": ["https://north.example:6443"]})]
ResolvedPath = Annotated[Path, BeforeValidator(_resolve_path),
                         WithJsonSchema({"type": "string", "description": "A path; ~ and ${ENV} expand; "
                                         "relative to the fleet file."})]
