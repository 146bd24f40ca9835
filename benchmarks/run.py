"""fleetplan's benchmark suite: one command, a table, PASS/FAIL per target, docs/performance.md.

    python3 benchmarks/run.py            # full: N = 10, 50, 200 members; writes docs/performance.md
    python3 benchmarks/run.py --ci       # CI-sized: N = 10, one repeat; writes nothing unless --doc
    make bench                           # the full run, with the lab's binaries

What it measures (issue 8), all in one run on one machine:
1. start-up of `fleetplan --help` / `validate` (benchmarks/startup.py);
2. pure CPU: render, graph and plan 1,000 members from in-memory snapshots (planning_cpu.py);
3. per N: a scale fleet (scalefleet.py) of 1 leader + N members on the lab's 3 clusters, each
   member with its own kubeconfig and connection, behind a latency proxy per lab cluster
   (fleetplan.lab.proxy, default 20 ms per round trip): the kubectl baseline's cold apply,
   fleetplan's cold apply, fleetplan's no-op plan (repeated; median) with its API requests per
   member cluster, and the kubectl baseline's diff loop. Peak RSS and CPU time are the child
   process's own (wait4 rusage).

The lab is reused when `--lab-dir` (or $FLEETPLAN_LAB_DIR) names a running one of 3+ clusters;
otherwise one is started in a temporary directory and stopped at the end. Objects of a run are
deleted at the end of each N (their namespaces, by run label).

Exit status: 0 every measured target passed, 1 a target failed, 2 the benchmark itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from baseline import baseline_name, write_scripts  # noqa: E402
from measuring import ROOT, Measurement, measure, measure_fleetplan, processes_cpu_s, self_cpu_s  # noqa: E402
from planning_cpu import CpuResult, measure_planning  # noqa: E402
from reporting import machine_facts, render_table, targets_for, write_doc  # noqa: E402
from scalefleet import LEADER, endpoints_for, remove, write_fleet  # noqa: E402
from startup import StartupRow, measure_startup  # noqa: E402

from fleetplan.errors import FleetplanError  # noqa: E402


@dataclass(frozen=True)
class ScaleResult:
    members: int
    objects: int
    cold_apply_s: float
    cold_apply_cpu_s: float
    cold_apply_rss_mib: float
    noop_plan_s: float  # median of the repeats
    noop_plan_cpu_s: float
    noop_plan_rss_mib: float
    requests_per_member: float  # the largest count among member clusters, no-op plan
    requests_per_member_mean: float
    requests_by_kind: dict[str, float]  # mean per member cluster, no-op plan
    leader_requests: int
    baseline_apply_s: float
    baseline_apply_cpu_s: float
    baseline_diff_s: float
    cold_apply_lab_cpu_s: float = 0.0  # the lab's processes during fleetplan's cold apply
    cold_apply_proxy_cpu_s: float = 0.0  # the latency proxies (this process) during it

    @property
    def cold_apply_machine_cpu_s(self) -> float:
        return self.cold_apply_cpu_s + self.cold_apply_lab_cpu_s + self.cold_apply_proxy_cpu_s

    @property
    def apply_ratio(self) -> float:
        return self.baseline_apply_s / self.cold_apply_s if self.cold_apply_s else 0.0

    @property
    def plan_ratio(self) -> float:
        return self.baseline_diff_s / self.noop_plan_s if self.noop_plan_s else 0.0

    @property
    def peak_rss_mib(self) -> float:
        return max(self.cold_apply_rss_mib, self.noop_plan_rss_mib)


class BenchmarkError(Exception):
    """A command of the benchmark failed: the figures would be meaningless."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sizes = args.sizes or ([10] if args.ci else [10, 50, 200])
    repeats = args.repeats or (1 if args.ci else 3)
    command = "python3 benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        results = run(sizes, repeats, args)
    except (BenchmarkError, FleetplanError) as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        return 2
    startup_rows, cpu, scale = results
    targets = targets_for(startup_rows, cpu, scale)
    print()
    print(render_table(startup_rows, cpu, scale, targets, args.latency))
    doc = args.doc or (None if args.ci else str(ROOT / "docs" / "performance.md"))
    if doc and not args.no_doc:
        write_doc(Path(doc), command.strip(), machine_facts(), startup_rows, cpu, scale, targets, args.latency)
        print(f"\nwrote {doc}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "startup": [asdict(r) for r in startup_rows], "cpu": asdict(cpu),
            "scale": [{**asdict(r), "apply_ratio": r.apply_ratio, "plan_ratio": r.plan_ratio} for r in scale],
            "targets": [asdict(t) | {"verdict": t.verdict} for t in targets],
            "latency_s": args.latency, "machine": machine_facts(),
        }, indent=2))
    return 1 if any(t.verdict == "FAIL" for t in targets) else 0


def run(sizes: Sequence[int], repeats: int, args: argparse.Namespace
        ) -> tuple[list[StartupRow], CpuResult, list[ScaleResult]]:
    _say("start-up")
    startup_rows = measure_startup(args.startup_repeats or (3 if args.ci else 15))
    _say(f"pure CPU: planning {args.cpu_members} members in memory")
    cpu = measure_planning(args.cpu_members, repeats)
    scale: list[ScaleResult] = []
    with _lab(args.lab_dir, args.first_index) as lab:
        kubectl = str(_kubectl())
        for count in sizes:
            scale.append(_scale_run(lab, kubectl, count, repeats, args.latency))
    return startup_rows, cpu, scale


def _scale_run(lab: Any, kubectl: str, count: int, repeats: int, latency: float) -> ScaleResult:
    from fleetplan.lab import proxy

    name = f"bn{count}x{uuid.uuid4().hex[:5]}"
    proxies = {c.name: proxy.start(c.host, c.api_port, listen_host=c.host, latency=latency)
               for c in lab.clusters[:3]}
    root = Path(tempfile.mkdtemp(prefix=f"fleetplan-bench-{count}-"))
    endpoints = endpoints_for(lab.clusters[:3], lambda c: proxies[c.name].server)
    try:
        fleet = write_fleet(root, name, count, endpoints)
        apply_script, diff_script = write_scripts(fleet, kubectl)
        _say(f"N={count}: kubectl baseline, cold apply ({count + 1} clusters, one after another)")
        base_apply = _checked(measure(["bash", str(apply_script)], root), "baseline apply")
        _say(f"N={count}: fleetplan cold apply")
        lab_before, proxies_before = processes_cpu_s(str(lab.dir)), self_cpu_s()
        cold = _checked(measure_fleetplan(["apply", "--auto-approve", "--only", "resources"], root),
                        "fleetplan apply")
        lab_cpu, proxy_cpu = processes_cpu_s(str(lab.dir)) - lab_before, self_cpu_s() - proxies_before
        plans: list[Measurement] = []
        for i in range(repeats):
            _say(f"N={count}: fleetplan no-op plan ({i + 1}/{repeats})")
            plans.append(_checked(measure_fleetplan(["plan", "--detailed-exitcode", "--only", "resources"], root),
                                  "fleetplan no-op plan (exit 0 means no changes)"))
        _say(f"N={count}: kubectl baseline, diff loop")
        base_diff = _checked(measure(["bash", str(diff_script)], root), "baseline diff")
    finally:
        for handle in proxies.values():
            handle.stop()
        for run_name in (name, baseline_name(name)):
            remove(run_name, endpoints, kubectl)
        shutil.rmtree(root, ignore_errors=True)
    median_plan = sorted(plans, key=lambda m: m.wall_s)[len(plans) // 2]
    per_member = {m: median_plan.requests.get(m, {}) for m in fleet.members}
    totals = [sum(kinds.values()) for kinds in per_member.values()]
    kinds = sorted({k for c in per_member.values() for k in c})
    return ScaleResult(
        members=count,
        objects=2 + 2 * count + 6 * count,
        cold_apply_s=cold.wall_s, cold_apply_cpu_s=cold.cpu_s, cold_apply_rss_mib=cold.peak_rss_mib,
        noop_plan_s=statistics.median(p.wall_s for p in plans),
        noop_plan_cpu_s=statistics.median(p.cpu_s for p in plans),
        noop_plan_rss_mib=max(p.peak_rss_mib for p in plans),
        requests_per_member=max(totals) if totals else 0.0,
        requests_per_member_mean=statistics.mean(totals) if totals else 0.0,
        requests_by_kind={k: statistics.mean(c.get(k, 0) for c in per_member.values()) for k in kinds},
        leader_requests=sum(median_plan.requests.get(LEADER, {}).values()),
        baseline_apply_s=base_apply.wall_s, baseline_apply_cpu_s=base_apply.cpu_s,
        baseline_diff_s=base_diff.wall_s,
        cold_apply_lab_cpu_s=lab_cpu, cold_apply_proxy_cpu_s=proxy_cpu,
    )


def _checked(result: Measurement, what: str) -> Measurement:
    if result.exit_code != 0:
        raise BenchmarkError(f"{what} exited {result.exit_code}:\n{result.output}")
    return result


@contextmanager
def _lab(lab_dir: str | None, first_index: int) -> Iterator[Any]:
    from fleetplan.lab import down, up, wait_until_up

    chosen = lab_dir or os.environ.get("FLEETPLAN_LAB_DIR")
    if chosen:
        found = wait_until_up(chosen, timeout=30)
        if found is not None and found.up and len(found.lab.clusters) >= 3:
            _say(f"reusing the lab in {chosen}")
            yield found.lab
            return
        raise BenchmarkError(f"no running lab of 3+ clusters in {chosen}")
    directory = Path(tempfile.mkdtemp(prefix="fleetplan-bench-lab-"))
    _say("starting a lab of 3 clusters")
    started = up(3, "bench", directory, first_index=first_index)
    try:
        yield started
    finally:
        down(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _kubectl() -> Path:
    from fleetplan.lab.binaries import find_bin_dir

    return find_bin_dir() / "kubectl"


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="CI-sized: N=10, one repeat, no doc.")
    parser.add_argument("--sizes", type=int, nargs="+", help="Member counts (default 10 50 200).")
    parser.add_argument("--repeats", type=int, help="No-op plan and CPU repeats (default 3; --ci 1).")
    parser.add_argument("--startup-repeats", type=int, help="Start-up timing repeats (default 15; --ci 3).")
    parser.add_argument("--latency", type=float, default=0.02, help="Added round trip in seconds (0.02).")
    parser.add_argument("--cpu-members", type=int, default=1000, help="Members planned in memory (1000).")
    parser.add_argument("--lab-dir", help="Reuse the running lab in this directory.")
    parser.add_argument("--first-index", type=int, default=61,
                        help="Loopback index of a lab started here (127.0.<i>.1; default 61).")
    parser.add_argument("--doc", help="Write the report here (default docs/performance.md, not with --ci).")
    parser.add_argument("--no-doc", action="store_true", help="Do not write the report.")
    parser.add_argument("--json", help="Also write the figures as JSON to this file.")
    return parser


if __name__ == "__main__":
    sys.exit(main())
