"""Start-up time of `fleetplan --help` and `fleetplan validate`, against `python -c pass`.

The budget (issue 2) is 0.3 s wall per command on this machine. All commands are timed in the
same run, interleaved, so machine load affects them alike; the median of the runs is compared
with the budget and the bare interpreter is shown for scale.

    python3 benchmarks/startup.py [--repeats N]

`measure_startup()` returns the rows and `startup_passed(rows)` the verdict, for
benchmarks/run.py to call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 0.3
EXAMPLE = "examples/antrea/fleet.yaml"
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "fleetplan --help": [sys.executable, "-m", "fleetplan", "--help"],
    f"fleetplan validate -f {EXAMPLE}": [sys.executable, "-m", "fleetplan", "validate", "-f", EXAMPLE],
    f"fleetplan validate -f {EXAMPLE} --offline": [sys.executable, "-m", "fleetplan", "validate", "-f",
                                                  EXAMPLE, "--offline"],
}
BASELINE = "python -c pass"


@dataclass(frozen=True)
class StartupRow:
    command: str
    median_s: float
    min_s: float
    max_s: float
    budget_s: float | None  # None for the baseline

    @property
    def passed(self) -> bool:
        return self.budget_s is None or self.median_s < self.budget_s


def _time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{argv} exited {result.returncode}: {result.stderr.decode()[:300]}")
    return elapsed


def measure_startup(repeats: int = 15) -> list[StartupRow]:
    """Time every command `repeats` times (interleaved, after one warm-up round)."""
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():
        _time_once(argv)  # warm the page cache and .pyc files
    for _ in range(repeats):
        for name, argv in COMMANDS.items():
            samples[name].append(_time_once(argv))
    return [StartupRow(name, statistics.median(times), min(times), max(times),
                       None if name == BASELINE else BUDGET_SECONDS) for name, times in samples.items()]


def startup_passed(rows: list[StartupRow]) -> bool:
    return all(row.passed for row in rows)


def render_table(rows: list[StartupRow]) -> str:
    width = max(len(r.command) for r in rows)
    lines = [f"{'command':<{width}}  median    min      max      verdict"]
    for row in rows:
        verdict = "baseline" if row.budget_s is None else ("PASS" if row.passed else "FAIL") + \
            f" (< {row.budget_s:.1f} s)"
        lines.append(f"{row.command:<{width}}  {row.median_s:6.3f} s {row.min_s:6.3f} s {row.max_s:6.3f} s "
                     f"{verdict}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows = measure_startup(args.repeats)
    print(render_table(rows))
    ok = startup_passed(rows)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
