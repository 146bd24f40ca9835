"""The one exception root and the diagnostic values problems travel as.

Every failure a user can cause or meet is a `FleetplanError` carrying one or more `Diagnostic`s
(what, where, hint). The CLI catches the root once, prints one line per diagnostic and maps the
error's `exit_code` to the process exit status. Anything else that escapes is a bug, and only then
is a traceback shown (or always with `--debug`).

    FleetplanError                 exit 1 unless stated
    ├── ConfigError                fleet.yaml is unreadable or invalid
    ├── StateError                 the state file is damaged, from the future, or locked
    │   └── LockedError            another run holds the lock (exit 4)
    ├── PlanError                  a plan cannot be made or a saved plan is stale
    ├── ClusterError               a cluster could not be reached or refused a request
    ├── ApplyError                 steps failed; carries their root causes (exit 1)
    └── LabError                   the local lab could not be built, started or stopped
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Stable, documented process exit codes."""

    OK = 0
    ERROR = 1  # invalid input, failed apply, any FleetplanError
    CHANGES = 2  # `plan --detailed-exitcode` found changes
    INTERNAL = 3  # a bug: an unexpected exception reached the boundary
    LOCKED = 4  # the state is locked by another run
    INTERRUPTED = 130


@dataclass(frozen=True)
class Location:
    """Where in a file a problem is: 1-based line and column, and the field path."""

    file: str
    line: int | None = None
    column: int | None = None
    path: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where


@dataclass(frozen=True)
class Diagnostic:
    """One problem: a summary, where it is (a file location or an address), and a hint."""

    summary: str
    location: Location | None = None
    address: str | None = None
    hint: str | None = None
    severity: str = "error"  # "error" | "warning"

    def render(self) -> str:
        """The one-line form: `file:line:col: error: spec.members[1].name: summary (hint: ...)`."""
        parts = []
        if self.location is not None:
            parts.append(f"{self.location}: ")
        elif self.address:
            parts.append(f"{self.address}: ")
        parts.append(f"{self.severity}: ")
        if self.location is not None and self.location.path:
            parts.append(f"{self.location.path}: ")
        parts.append(self.summary)
        if self.hint:
            parts.append(f" (hint: {self.hint})")
        return "".join(parts)

    def as_dict(self) -> dict[str, object]:
        loc = self.location
        return {
            "severity": self.severity,
            "summary": self.summary,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "path": loc.path if loc else None,
            "address": self.address,
            "hint": self.hint,
        }


class FleetplanError(Exception):
    """Root of every error fleetplan raises on purpose."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, summary: str | Iterable[Diagnostic], *, hint: str | None = None,
                 address: str | None = None) -> None:
        if isinstance(summary, str):
            self.diagnostics: tuple[Diagnostic, ...] = (Diagnostic(summary, address=address, hint=hint),)
        else:
            self.diagnostics = tuple(summary)
        super().__init__("; ".join(d.render() for d in self.diagnostics))


class ConfigError(FleetplanError):
    """fleet.yaml (or a file it names) is unreadable or invalid."""


class StateError(FleetplanError):
    """The state is damaged, from a newer fleetplan, or cannot be written."""


class LockedError(StateError):
    """Another run holds the state lock."""

    exit_code = ExitCode.LOCKED


class PlanError(FleetplanError):
    """A plan cannot be made, or a saved plan no longer matches the state or the clusters."""


class ClusterError(FleetplanError):
    """A cluster could not be reached, or refused a request in a way retries will not fix."""


class ApplyError(FleetplanError):
    """One or more steps failed; the diagnostics are their root causes."""


class LabError(FleetplanError):
    """The local lab could not be built, started, reached or stopped."""
