"""Durations as fleet.yaml writes them (`24h`, `90m`, `1h30m`, `45s`, `7d`) and their seconds.

Pure functions with no third-party imports, so the engine can format a duration without pulling
in pydantic. A duration is a non-empty sequence of `<integer><unit>` terms in falling unit order,
each unit at most once; its value must be positive.
"""

from __future__ import annotations

import re

DURATION_PATTERN = r"^(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?$"
_TERM = re.compile(r"([0-9]+)([dhms])")
_WHOLE = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """Seconds in `text`; raises ValueError with a message fit for a user on a bad duration."""
    if not text or not _WHOLE.match(text):
        raise ValueError(f"{text!r} is not a duration; write it like 24h, 90m, 1h30m or 45s")
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _TERM.findall(text))
    if seconds <= 0:
        raise ValueError(f"{text!r} is zero; a duration must be positive")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest fleet.yaml spelling of `seconds` (`5400` -> `1h30m`)."""
    if seconds <= 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
