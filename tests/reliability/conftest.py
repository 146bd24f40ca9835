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
import sys
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


def _antrea_kit() -> Any:
    """The Antrea integration tests' helpers (AntreaLab: fleet files and the SIMULATIONS)."""
    import importlib.util

    path = ROOT / "tests" / "integration" / "antrea" / "conftest.py"
    spec = importlib.util.spec_from_file_location("antrea_kit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["antrea_kit"] = module  # dataclasses resolve string annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def antrea_fleet(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An Antrea fleet (leader c1, members c2 and c3) applied through the CLI, with the controller
    and member agent simulations running; destroyed at the end of the session."""
    from fleetkit import cli_env

    kit = _antrea_kit()
    env = kit.AntreaLab(lab, tmp_path_factory.mktemp("antrea"))
    env.start_simulations()
    fleet = env.full_fleet()
    env.cli_runs = []

    def cli(*args: str, check: int | None = 0, env_extra: dict[str, str] | None = None) -> Any:
        import subprocess
        import sys

        done = subprocess.run([sys.executable, "-m", "fleetplan", *args], cwd=env.tmp, env=cli_env(env_extra),
                              capture_output=True, text=True, timeout=600)
        env.cli_runs.append((" ".join(args), done))
        if check is not None:
            assert done.returncode == check, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    env.cli, env.fleet_file = cli, fleet
    try:
        yield env
    finally:
        try:
            env.clean_up()
        finally:
            env.stop()


@pytest.fixture(scope="session")
def ocm_fleet(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An OCM fleet (hub c1, spokes c2 and c3) applied through the CLI, with the hub operator and
    registration agent simulations running; destroyed at the end of the session."""
    import subprocess
    import types
    import uuid

    from fleetkit import cli_env

    from fleetplan.lab.simulators.ocm import HubOperatorSimulation, RegistrationAgentSimulation

    mirror = Path(os.environ.get("FLEETPLAN_MIRROR") or ROOT.parent / "shared" / "upstream")
    tmp = tmp_path_factory.mktemp("ocm")
    logs: list[str] = []
    hub, spokes = lab.clusters[0], lab.clusters[1:3]
    sims = [HubOperatorSimulation(hub, "v1.3.1", mirror, log=logs.append).start()]
    sims += [RegistrationAgentSimulation(c, log=logs.append).start() for c in spokes]
    suffix = uuid.uuid4().hex[:5]
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": f"ocm-{suffix}"},
           "spec": {"stack": "ocm", "version": "v1.3.1", "manifests": {"mirror": str(mirror)},
                    "clusterSet": {"name": f"set-{suffix}"},
                    "leader": {"name": hub.name, "kubeconfig": hub.kubeconfig, "context": hub.context},
                    "members": [{"name": c.name, "kubeconfig": c.kubeconfig, "context": c.context} for c in spokes],
                    "wait": {"timeout": "1m"}, "state": {"path": str(tmp / "state.json")}}}
    fleet = tmp / "fleet.yaml"
    fleet.write_text(json.dumps(doc))

    def cli(*args: str, check: int | None = 0) -> Any:
        done = subprocess.run([sys.executable, "-m", "fleetplan", *args, "-f", str(fleet)], cwd=tmp,
                              env=cli_env(), capture_output=True, text=True, timeout=600)
        if check is not None:
            assert done.returncode == check, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}\n" \
                                             + "\n".join(logs[-15:])
        return done

    env = types.SimpleNamespace(hub=hub, spokes=spokes, tmp=tmp, fleet_file=fleet, cli=cli, logs=logs)
    try:
        cli("apply", "--auto-approve")
        yield env
    finally:
        try:
            cli("destroy", "--auto-approve", "--force", check=None)
        finally:
            for sim in sims:
                sim.stop()


@pytest.fixture(scope="session")
def destroy_later(lab: Any) -> Any:
    """`destroy_later(fleet)`: destroy a ResourcesFleet at the end of the session, all of them at
    once (namespace deletion is waiting, not work, so they overlap well); failures are reported."""
    from concurrent.futures import ThreadPoolExecutor

    pending: list[Any] = []
    yield pending.append
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda f: f.run("destroy", "--auto-approve", check=None), pending))
    failed = [f"{f.name}: {r.stderr.strip()[-300:]}" for f, r in zip(pending, results, strict=True) if r.returncode]
    assert not failed, failed
