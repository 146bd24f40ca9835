"""The reliability suite's report: every test records rows in `fleetkit.RESULTS`; at session end
they are written to `tests/reliability/last-run.json` and rendered into `docs/reliability.md`.

Categories that did not run in this session keep the rows of the run that last produced them
(each section says when), so running one file does not wipe the others. The report is written
only when at least one reliability test ran.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import pytest
from fleetkit import FULL, RESULTS, ROOT
from report import render

LAST_RUN = Path(__file__).resolve().parent / "last-run.json"
DOC = ROOT / "docs" / "reliability.md"
_OUTCOMES: dict[str, dict[str, int]] = {}
_STARTED = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if "tests/reliability" not in str(item.fspath).replace(os.sep, "/"):
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        module = Path(str(item.fspath)).stem
        counts = _OUTCOMES.setdefault(module, {"passed": 0, "failed": 0, "skipped": 0})
        counts[report.outcome] = counts.get(report.outcome, 0) + 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _OUTCOMES or os.environ.get("FLEETPLAN_RELIABILITY_NO_REPORT"):
        return
    try:
        previous = json.loads(LAST_RUN.read_text())
    except (FileNotFoundError, ValueError):
        previous = {"categories": {}, "tests": {}}
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(_STARTED))
    run = {"when": stamp, "full": FULL, "seconds": round(time.time() - _STARTED, 1),
           "python": platform.python_version()}
    categories = dict(previous.get("categories", {}))
    for name, rows in RESULTS.items():
        categories[name] = {"run": run, "rows": rows}
    tests = dict(previous.get("tests", {}))
    for module, counts in _OUTCOMES.items():
        tests[module] = {"run": run, **counts}
    data = {"categories": categories, "tests": tests}
    LAST_RUN.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(data))
