"""Semantic checks over a validated Fleet (placeholder until the full set lands)."""

from __future__ import annotations

from fleetplan.config.models import Fleet
from fleetplan.config.positions import Positions
from fleetplan.errors import Diagnostic


def check_semantics(fleet: Fleet, positions: Positions, *, offline: bool) -> tuple[Fleet, list[Diagnostic]]:
    return fleet, []
