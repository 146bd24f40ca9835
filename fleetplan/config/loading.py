"""Loading a fleet file: read YAML with positions, validate the models, run the semantic checks.

`check_fleet_file` always returns every diagnostic it can find (errors and warnings) with the
model when the models validated; `load_fleet` is the strict form the engine uses: it raises one
`ConfigError` carrying all error diagnostics, or returns the frozen `Fleet`. Checks that touch the
machine beyond the fleet file's own directory tree (kubeconfigs and their contexts) are skipped
with `offline=True`. A member-only fleet's leader name is taken from its join file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from fleetplan.config.checking import check_semantics
from fleetplan.config.models import API_VERSION, KIND, Fleet
from fleetplan.config.positions import Positions
from fleetplan.config.reading import read_yaml_file
from fleetplan.errors import ConfigError, Diagnostic


@dataclass(frozen=True)
class CheckedFleet:
    """The outcome of checking a fleet file: the model (None when it did not validate) and findings."""

    file: Path
    fleet: Fleet | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        return self.fleet is not None and not self.errors


def _header_problems(data: dict[object, object], positions: Positions) -> list[Diagnostic]:
    """apiVersion and kind first: a wrong one makes every other message noise."""
    out = []
    expected = (("apiVersion", API_VERSION, f"the first line should be 'apiVersion: {API_VERSION}'"),
                ("kind", KIND, f"write 'kind: {KIND}'"))
    for key, want, hint in expected:
        got = data.get(key)
        if key not in data:
            out.append(Diagnostic(f"missing required field {key!r}; expected {want!r}",
                                  positions.value(()), hint=hint))
        elif got != want:
            shown = f"{got!r}" if isinstance(got, str) else f"a {type(got).__name__}"
            out.append(Diagnostic(f"expected {want!r}, found {shown}", positions.value((key,)), hint=hint))
    return out


def check_fleet_file(path: str | os.PathLike[str], *, offline: bool = False) -> CheckedFleet:
    """Read, validate and check `path`; unreadable or unparsable files raise ConfigError."""
    file = Path(path)
    doc = read_yaml_file(file)
    positions = Positions(str(file), doc.tree)
    header = _header_problems(doc.data, positions)
    if header:
        return CheckedFleet(file, None, tuple(header))
    base_dir = str(file.resolve().parent)
    try:
        fleet = Fleet.model_validate(doc.data, context={"base_dir": base_dir})
    except ValidationError as err:
        from fleetplan.config.explaining import explain_validation_error  # difflib etc.: only on errors

        return CheckedFleet(file, None, tuple(explain_validation_error(Fleet, err, positions)))
    fleet, findings = check_semantics(fleet, positions, offline=offline)
    return CheckedFleet(file, fleet, tuple(findings))


def load_fleet(path: str | os.PathLike[str], *, offline: bool = False) -> Fleet:
    """The validated, frozen Fleet in `path`; raises ConfigError listing every error found."""
    checked = check_fleet_file(path, offline=offline)
    if checked.fleet is None or checked.errors:
        raise ConfigError(checked.errors)
    return checked.fleet
