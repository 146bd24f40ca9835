"""The `kubernetes` state backend on the lab, driven through the CLI from separate processes.

The state Secret and the lock Lease live in a fresh namespace on the lab's first cluster. A
Deployment that can never become available (it selects no node) keeps an apply waiting, and so
holding the lock, for as long as a test needs. The fleet file and manifests come from the shared
kit, `kit.fleets`.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import controllerkit as kit
import pytest
from kit.fleets import cli, cli_env, fleet_yaml, manifests

from fleetplan.addrs import Address
from fleetplan.errors import StateError
from fleetplan.state.kubernetes_store import KubernetesStateStore
from fleetplan.state.leasing import LEASE_API, expires_at, holder_of, is_expired
from fleetplan.state.model import ResourceRecord, State

pytestmark = pytest.mark.integration
LEASE_SECONDS = 8


class CliFleet:
    def __init__(self, root: Path, lab: Any, state_ns: str) -> None:
        self.root, self.lab, self.state_ns = root, lab, state_ns
        self.name = "k" + uuid.uuid4().hex[:8]
        self.app_ns = self.name + "-app"
        c = lab.clusters
        (root / "extras").mkdir()
        state = f"{{backend: kubernetes, namespace: {state_ns}, leaseDuration: {LEASE_SECONDS}s}}"
        (root / "fleet.yaml").write_text(fleet_yaml(self.name, c[:2], stack="antrea", state=state))
        self.write(stuck=False)
        self.api = kit.objects(c[0])
        self.secret = f"fleetplan-state-{self.name}"

    def write(self, *, stuck: bool) -> None:
        parts = ("namespace", "configmap-color", *(("deployment-unschedulable",) if stuck else ()))
        (self.root / "extras" / "app.yaml").write_text(manifests(self.app_ns, "green", *parts))

    def command(self, *args: str) -> list[str]:
        engine = args[0] in ("plan", "apply", "destroy")  # commands that render stacks
        return cli(*args, *(("--only", "resources") if engine else ()))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), cwd=self.root, env=cli_env(), capture_output=True,
                              text=True, timeout=180)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*args), cwd=self.root, env=cli_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def lease(self) -> dict[str, Any] | None:
        return self.api.get(LEASE_API, "Lease", self.state_ns, self.secret)


@pytest.fixture
def cli_fleet(tmp_path: Path, lab: Any, lab_namespace: Any) -> Any:
    fleet = CliFleet(tmp_path, lab, lab_namespace(lab.clusters[0].name))
    yield fleet
    fleet.write(stuck=False)
    fleet.run("destroy", "--auto-approve")


def test_second_apply_is_refused_and_a_killed_holder_loses_the_lock_when_the_lease_expires(cli_fleet: Any) -> None:
    fleet = cli_fleet
    fleet.write(stuck=True)
    holder = fleet.start("apply", "--auto-approve")
    try:
        lease = kit.wait_for("the first apply to hold the Lease", lambda: holder_of(fleet.lease()), 60)
        assert lease.pid == holder.pid and lease.operation == "apply"

        second = fleet.run("apply", "--auto-approve")
        assert second.returncode == 4, second.stderr
        assert "is locked by" in second.stderr and f"pid {holder.pid}" in second.stderr
        assert f"fleetplan force-unlock {lease.id}" in second.stderr

        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.time()
        ends = expires_at(fleet.lease())
        assert ends is not None and ends > time.time() + 2, "the Lease should outlive its holder for a while"
        refused = fleet.run("apply", "--auto-approve")
        if time.time() < ends:  # the run reached the lock before expiry (it normally does)
            assert refused.returncode == 4, refused.stderr
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()

    kit.wait_for("the Lease to expire", lambda: is_expired(fleet.lease()), LEASE_SECONDS + 10, every=0.2)
    expired_after = time.time() - killed_at
    assert expired_after <= LEASE_SECONDS + 1.0, f"expired {expired_after:.1f}s after the kill"

    fleet.write(stuck=False)
    third = fleet.run("apply", "--auto-approve")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "took over the expired lock" in third.stderr
    assert holder_of(fleet.lease()) is None  # released at the end of the run

    listed = fleet.run("state", "list")
    assert listed.returncode == 0
    assert f"{fleet.lab.clusters[1].name}/core/ConfigMap/{fleet.app_ns}/settings" in listed.stdout.split()
    assert fleet.api.get("v1", "Secret", fleet.state_ns, fleet.secret) is not None
    plan = fleet.run("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout  # converged: no changes


def test_force_unlock_releases_a_held_lock(cli_fleet: Any) -> None:
    fleet = cli_fleet
    store = KubernetesStateStore(fleet.api, fleet.state_ns, fleet.secret, lease_duration=LEASE_SECONDS)
    info = store.lock("apply")  # a holder in this process, renewing its Lease
    try:
        refused = fleet.run("apply", "--auto-approve")
        assert refused.returncode == 4
        wrong = fleet.run("force-unlock", "not-the-id")
        assert wrong.returncode == 1 and f"fleetplan force-unlock {info.id}" in wrong.stderr
        released = fleet.run("force-unlock", info.id)
        assert released.returncode == 0 and "Released the lock" in released.stdout
        applied = fleet.run("apply", "--auto-approve")
        assert applied.returncode == 0, applied.stderr
        # the old holder notices at its next renewal and refuses to write over the new state
        kit.wait_for("the old holder to notice", lambda: store._lock is not None and store._lock.lost.is_set(),
                     LEASE_SECONDS)
        with pytest.raises(StateError, match="lost the lock"):
            store.persist(State.new(fleet.name))
    finally:
        store.unlock(info.id)


def test_large_state_is_split_into_parts_and_read_back(cli_fleet: Any) -> None:
    fleet = cli_fleet
    store = KubernetesStateStore(fleet.api, fleet.state_ns, fleet.secret, part_size=2048)
    state = State.new(fleet.name)
    for i in range(300):
        address = Address("k1", "", "ConfigMap", "ns", f"cm-{i}-{uuid.uuid4().hex}")
        state = state.with_record(ResourceRecord(address, "v1", uid=str(uuid.uuid4()), applied_hash=uuid.uuid4().hex))
    with store.locked("test"):
        written = store.persist(state)
    main = fleet.api.get("v1", "Secret", fleet.state_ns, fleet.secret)
    assert main is not None and "state.json.gz" not in (main.get("data") or {})
    parts, _ = fleet.api.list("v1", "Secret", fleet.state_ns, f"fleetplan.dev/state-of={fleet.secret}")
    assert len(parts) >= 3
    again = KubernetesStateStore(fleet.api, fleet.state_ns, fleet.secret).read()
    assert again == written and len(again.resources) == 300

    small = State.new(fleet.name)
    with store.locked("test"):
        store.persist(small)
    parts, _ = fleet.api.list("v1", "Secret", fleet.state_ns, f"fleetplan.dev/state-of={fleet.secret}")
    assert parts == []  # the old parts are removed once the new version is committed
    assert KubernetesStateStore(fleet.api, fleet.state_ns, fleet.secret).read().serial == written.serial + 1
    fleet.api.delete("v1", "Secret", fleet.state_ns, fleet.secret)
