"""API faults between fleetplan and the clusters, injected by the lab proxy (loopback only).

Every cluster of a `resources` fleet is reached through a `fleetplan.lab.proxy` handle (TCP mode,
or HTTPS-terminating where an HTTP status must be injected). Transient faults (latency, 429 with
Retry-After, 500, 503, connection resets) must be retried to success: exit 0 and the clean end
state. A member that cannot be reached for the whole run must fail alone: the others converge,
the run exits non-zero naming it, and the state records exactly what was done.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleetkit import FULL, ResourcesFleet, assert_clean_end_state, record

from fleetplan.lab.proxy import Faults, ProxyHandle, TerminatingTLS, start, write_proxied_kubeconfig

pytestmark = pytest.mark.integration


class ProxiedFleet:
    """A resources fleet whose kubeconfigs all point at per-cluster proxies."""

    def __init__(self, root: Path, lab: Any, terminating: set[str]) -> None:
        self.proxies: dict[str, ProxyHandle] = {}
        kubeconfigs = {}
        for cluster in lab.clusters[:3]:
            tls = TerminatingTLS.for_lab_cluster(cluster.dir) if cluster.name in terminating else None
            handle = start(cluster.host, cluster.api_port, tls=tls)
            self.proxies[cluster.name] = handle
            kubeconfigs[cluster.name] = str(write_proxied_kubeconfig(
                cluster.kubeconfig, cluster.context, handle.server, root / f"{cluster.name}.kubeconfig"))
        self.fleet = ResourcesFleet(root, lab, kubeconfigs=kubeconfigs, wait_timeout="45s", prefix="f")

    def injected(self) -> int:
        return sum(p.stats.resets + sum(p.stats.injected.values()) + p.stats.hangs for p in self.proxies.values())

    def close(self) -> None:
        for handle in self.proxies.values():
            handle.stop()
        self.fleet.kubeconfigs = {c.name: c.kubeconfig for c in self.fleet.lab.clusters[:3]}
        self.fleet.write_fleet()  # destroyed later without the proxies


@pytest.fixture
def proxied(tmp_path: Path, lab: Any, destroy_later: Any) -> Iterator[Any]:
    made: list[ProxiedFleet] = []

    def make(terminating: set[str] = frozenset()) -> ProxiedFleet:  # type: ignore[assignment]
        made.append(ProxiedFleet(tmp_path, lab, set(terminating)))
        return made[-1]

    yield make
    for item in made:
        item.close()
        destroy_later(item.fleet)


TRANSIENT = {
    "latency 50 ms per round trip, every cluster": ({}, Faults(latency=0.05)),
    "connection resets (every 2nd new connection), every cluster": ({}, Faults(reset_every=2)),
    "429 Too Many Requests + Retry-After: 1 (every 4th request), c2": ({"c2"}, Faults(
        http_status=429, http_every=4, retry_after=1)),
    "503 Service Unavailable (every 3rd request), c3": ({"c3"}, Faults(http_status=503, http_every=3)),
    "500 Internal Server Error (every 5th request), c1": ({"c1"}, Faults(http_status=500, http_every=5)),
}
if FULL:
    TRANSIENT |= {
        "503 on the first 4 requests, every cluster": ({"c1", "c2", "c3"}, Faults(http_status=503, http_first=4)),
        "random resets (30%) and 20 ms latency, every cluster": ({}, Faults(reset_probability=0.3, latency=0.02,
                                                                           seed=7)),
        "429 + Retry-After: 2 on half the requests, c1": ({"c1"}, Faults(http_status=429, http_probability=0.5,
                                                                          retry_after=2, seed=3)),
    }


@pytest.mark.parametrize("scenario", list(TRANSIENT))
def test_transient_faults_are_retried_to_success(proxied: Any, scenario: str) -> None:
    terminating, faults = TRANSIENT[scenario]
    target = terminating or {"c1", "c2", "c3"}
    env = proxied(terminating)
    for name in target:
        env.proxies[name].set_faults(faults)
    done = env.fleet.run("apply", "--auto-approve", check=None)
    for handle in env.proxies.values():
        handle.set_faults(Faults())
    injected = env.injected()
    retried = done.stdout.count("retrying in")
    outcome = f"exit {done.returncode}, {retried} retries reported"
    honoured = faults.retry_after is None or f"retrying in {float(faults.retry_after):.1f}s" in done.stdout \
        or retried == 0
    ok = done.returncode == 0 and honoured and (injected > 0 or faults.latency > 0)
    try:
        if ok:
            assert_clean_end_state(env.fleet)
            outcome += ", clean end state"
    except AssertionError as err:
        ok, outcome = False, f"{outcome}; end state wrong: {err}"
    record("faults", scenario=scenario, injected=injected, expected="retried to success, exit 0",
           outcome=outcome, ok=ok)
    assert ok, f"{outcome}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _state_addresses(fleet: ResourcesFleet) -> set[str]:
    return {r["address"] for r in fleet.state()["resources"]}


@pytest.mark.parametrize("when", ["from the start", "from the first step on"])
def test_an_unreachable_member_fails_alone(proxied: Any, when: str, tmp_path: Path) -> None:
    env = proxied()
    fleet = env.fleet
    dark = env.proxies["c3"]
    if when == "from the start":
        dark.set_faults(refuse=True)
        done = fleet.run("apply", "--auto-approve", "--json", check=None)
    else:
        done = _apply_going_dark(fleet, dark, tmp_path / "apply.jsonl")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    final = next((e for e in events if e.get("type") == "apply_complete"), None)
    live = set(fleet.owned_live())
    recorded = _state_addresses(fleet)
    others = {a for a in live if not a.startswith("c3/")}
    on_c3 = {a for a in live if a.startswith("c3/")}
    problems = []
    if done.returncode == 0:
        problems.append("exit 0")
    if "c3" not in done.stderr:
        problems.append(f"error does not name c3: {done.stderr.strip()[:300]}")
    if "Traceback" in done.stderr:
        problems.append("traceback")
    if len(others) != 12:
        problems.append(f"the reachable clusters have {len(others)} of 12 objects")
    failed = set(final["failed"]) if final else set()
    if final is not None and not all(a.startswith("c3/") for a in failed | set(final["skipped"])):
        problems.append(f"failures outside c3: {failed}")
    journal = {e["address"] for e in fleet.state().get("journal", [])}
    # A write whose response was lost as c3 went dark may have happened on the server. The state cannot know,
    # so its intent stays in the journal (the next plan re-reads and adopts it); anything else live must be
    # recorded, and nothing recorded may be missing.
    if recorded - live or (live - recorded) - journal:
        problems.append(f"state != live: state-only {sorted(recorded - live)}, live-only and not journaled "
                        f"{sorted((live - recorded) - journal)}")
    if not journal <= {a for a in failed}:
        problems.append(f"journal holds steps that did not fail: {journal - failed}")
    outcome = (f"exit {done.returncode}; {len(others)}/12 objects on c1+c2, {len(on_c3)} on c3; state records "
               f"{len(recorded)} = live; failed: {len(failed)} c3 step(s); journal: {len(journal)}; error: "
               f"{(done.stderr.strip().splitlines() or [''])[0][:160]}")
    ok = not problems
    record("faults", scenario=f"member c3 unreachable {when} (connections refused)", injected=dark.stats.connections
           or "refused", expected="c3 fails alone, c1+c2 converge, exit non-zero naming c3, state exact",
           outcome=outcome if ok else f"{outcome}; PROBLEMS: {problems}", ok=ok)
    assert ok, f"{problems}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    dark.set_faults(refuse=False)
    fleet.run("apply", "--auto-approve")
    assert_clean_end_state(fleet)


def _apply_going_dark(fleet: ResourcesFleet, dark: ProxyHandle, log: Path) -> Any:
    """Run apply; refuse c3's connections as soon as the first step starts."""
    import subprocess
    import time

    from fleetkit import cli_env

    with log.open("w") as out:
        process = subprocess.Popen(fleet.command("apply", "--auto-approve", "--json"), cwd=fleet.root,
                                   env=cli_env(), stdout=out, stderr=subprocess.PIPE, text=True)
        while process.poll() is None and '"step_start"' not in log.read_text():
            time.sleep(0.01)
        dark.set_faults(Faults(refuse=True))
        _, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), stderr)
