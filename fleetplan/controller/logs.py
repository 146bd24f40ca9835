"""The controller's event log: one JSON object per line, on a stream (stderr by default).

Each event has `time`, `event` and fields given by the caller; None fields are left out. Callers
pass names, addresses, counts and diagnostics' summaries only, never bodies or kubeconfigs, so
nothing secret reaches the log. Writes are serialised, so lines from threads never interleave.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO


def json_log(stream: TextIO | None = None) -> Callable[..., None]:
    lock = threading.Lock()

    def log(event: str, **fields: Any) -> None:
        record = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event,
                  **{k: v for k, v in fields.items() if v is not None}}
        line = json.dumps(record, default=str)
        with lock:
            out = stream or sys.stderr
            out.write(line + "\n")
            out.flush()

    return log
