"""Shared fixtures: the session lab of real Kubernetes control planes, clients and namespaces.

`lab` starts 3 clusters (c1, c2, c3) in parallel once per session and stops them at the end, or
reuses a running lab when `$FLEETPLAN_LAB_DIR` names one that is up (then it is left running).
When the binaries are missing or the lab cannot start, tests that need it are skipped with the
reason, except under `CI=true`, where they fail: CI must never pass by skipping the real clusters.

When a test that used the lab fails, the tails of every component's log are attached to its report.

Offline by construction, for the whole session (and so for every subprocess a test spawns, which
inherits this environment):
- proxy variables (http_proxy, HTTPS_PROXY, ALL_PROXY, NO_PROXY, ...) are removed;
- `$FLEETPLAN_MIRROR` defaults to the absolute path of ../shared/upstream, so the stacks read the
  genuine release files from there instead of downloading them;
- `kit.netguard` refuses any connection from this process to an address that is not loopback or a
  unix socket, and a test during which one was attempted fails (even if the code under test
  swallowed the error).

A clean tree: files a run leaves behind that git would list as untracked (not ignored) are named
at the end of the run, and fail it under CI. Regenerated reports (tests/reliability/last-run.json,
docs/reliability.md) are tracked files, so rewriting them is not flagged.

Helpers for tests:
    lab                   fleetplan.lab.Lab: .clusters (LabCluster), lab["c2"], .kubeconfig (merged)
    lab_client(cluster, token=None, cert=None) -> kubernetes ApiClient: admin unless a bearer token
                          or a (cert, key) path pair is given
    lab_namespace(cluster) -> name of a fresh namespace, deleted after the test
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kit import netguard

from fleetplan.errors import FleetplanError
from fleetplan.lab import Lab, LabCluster

LAB_CLUSTERS = 3
_ACTIVE: dict[str, Lab] = {}
ROOT = Path(__file__).resolve().parents[1]
_UNTRACKED: dict[str, set[str]] = {}

# At import, before any test module is collected: collection itself must already be offline.
netguard.strip_proxies(os.environ)
if not os.environ.get("FLEETPLAN_MIRROR"):  # fleetplan reads an empty value as unset, and would download
    os.environ["FLEETPLAN_MIRROR"] = str((ROOT.parent / "shared" / "upstream").resolve())
netguard.install()


def _stays_on_this_machine(phase: str) -> Iterator[None]:
    """Fails the phase if anything in this process tried to connect off the machine meanwhile,
    even when the code under test caught the refusal."""
    before = len(netguard.REFUSED)
    yield
    attempts = netguard.REFUSED[before:]
    if attempts:
        pytest.fail(f"{len(attempts)} connection(s) off this machine were refused during {phase}: {attempts[0]}",
                    pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _stays_on_this_machine("setup")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _stays_on_this_machine("the test")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield from _stays_on_this_machine("teardown")


def _untracked() -> set[str] | None:
    """Files git would list as untracked (not ignored), or None outside a usable git checkout."""
    try:
        done = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(filter(None, done.stdout.decode(errors="replace").split("\0"))) if done.returncode == 0 else None


def pytest_sessionstart(session: pytest.Session) -> None:
    before = _untracked()
    if before is not None:
        _UNTRACKED["before"] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    after = _untracked()
    if "before" not in _UNTRACKED or after is None:
        return
    # Outside CI others may be adding files to the same tree meanwhile: there it is only reported.
    _UNTRACKED["left"] = after - _UNTRACKED["before"]
    if _UNTRACKED["left"] and _in_ci() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    left = sorted(_UNTRACKED.get("left", ()))
    if left:
        terminalreporter.write_sep("!", f"{len(left)} untracked file(s) appeared in the tree during this run")
        for path in left[:20]:
            terminalreporter.write_line(f"  {path}")
        terminalreporter.write_line("  write them under tmp_path, or add them to .gitignore if they are meant to stay")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(message: str) -> None:
    if _in_ci():
        pytest.fail(f"{message} (CI=true: the lab is required)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def lab_bin() -> Path:
    """The directory of the lab's binaries (skipped, or failed under CI, when they are missing)."""
    from fleetplan.lab.binaries import find_bin_dir

    try:
        return find_bin_dir()
    except FleetplanError as err:
        _unavailable(f"the lab's binaries are unavailable: {err}")
        raise


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    from fleetplan.lab import down, up, wait_until_up

    env_dir = os.environ.get("FLEETPLAN_LAB_DIR")
    if env_dir:
        try:
            found = wait_until_up(env_dir, timeout=30)
        except FleetplanError as err:
            found = None
            _unavailable(f"the lab in FLEETPLAN_LAB_DIR={env_dir} is unreadable: {err}")
        if found is not None and found.up and len(found.lab.clusters) >= LAB_CLUSTERS:
            _ACTIVE["lab"] = found.lab
            yield found.lab  # someone else's lab: never stopped here
            return
    lab_dir = Path(env_dir) if env_dir else tmp_path_factory.mktemp("lab")
    try:
        started = up(LAB_CLUSTERS, "c", lab_dir)
    except FleetplanError as err:
        _unavailable(f"the lab could not start: {err}")
        raise  # unreachable: skip/fail raise; keeps type checkers honest
    _ACTIVE["lab"] = started
    try:
        yield started
    finally:
        _ACTIVE.pop("lab", None)
        down(lab_dir)


@pytest.fixture(scope="session")
def lab_client(lab: Lab) -> Iterator[Callable[..., Any]]:
    """A factory of kubernetes ApiClients for lab clusters; all are closed at session end."""
    from kubernetes import client, config

    made: list[Any] = []

    def make(cluster: LabCluster | str, token: str | None = None,
             cert: tuple[Path, Path] | None = None) -> Any:
        target = lab[cluster] if isinstance(cluster, str) else cluster
        if token is None and cert is None:
            api = config.new_client_from_config(config_file=target.kubeconfig, context=target.context)
        else:
            conf = client.Configuration()
            conf.host = target.server
            conf.ssl_ca_cert = target.ca
            if token is not None:
                conf.api_key = {"authorization": f"Bearer {token}"}
            if cert is not None:
                conf.cert_file, conf.key_file = str(cert[0]), str(cert[1])
            api = client.ApiClient(conf)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


@pytest.fixture
def lab_namespace(request: pytest.FixtureRequest, lab: Lab,
                  lab_client: Callable[..., Any]) -> Iterator[Callable[[LabCluster | str], str]]:
    """`lab_namespace(cluster)` creates a uniquely named namespace there; deleted after the test."""
    from kubernetes import client

    created: list[tuple[Any, str]] = []
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")

    def make(cluster: LabCluster | str) -> str:
        core = client.CoreV1Api(lab_client(cluster))
        name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=name, labels={"fleetplan.dev/test": "true"})))
        created.append((core, name))
        return name

    yield make
    for core, name in created:
        try:
            core.delete_namespace(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    running = _ACTIVE.get("lab")
    if report.failed and running is not None and "lab" in getattr(item, "fixturenames", ()):
        from fleetplan.lab.processes import log_tail

        parts = []
        for cluster in running.clusters:
            for proc in cluster.processes:
                tail = log_tail(proc.log, 12)
                if tail:
                    parts.append(f"--- {cluster.name}/{proc.component} ({proc.log})\n{tail}")
        if parts:
            report.sections.append(("lab component logs (tails)", "\n".join(parts)))
