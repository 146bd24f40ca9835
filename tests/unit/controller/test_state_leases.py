"""The Lease lock and the Secret-backed state store, on the in-memory fake (pure logic)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from leasefakes import FakeObjects

from fleetplan.addrs import Address
from fleetplan.errors import LockedError, StateError
from fleetplan.state.kubernetes_store import KubernetesStateStore
from fleetplan.state.leasing import LEASE_API, LeaseLock, expires_at, holder_of, is_expired
from fleetplan.state.model import ResourceRecord, State
from fleetplan.state.storing import LockInfo


def info(name: str) -> LockInfo:
    return LockInfo(id=name, holder=f"{name}@host", host="host", pid=1, created="now", operation="apply")


def test_of_two_contenders_exactly_one_gets_the_lease() -> None:
    api = FakeObjects()
    first, second = LeaseLock(api, "ns", "l", 10, info("a")), LeaseLock(api, "ns", "l", 10, info("b"))
    assert first.try_acquire() == (True, None)
    taken, holder = second.try_acquire()
    assert not taken and holder is not None and holder.id == "a" and holder.holder == "a@host"
    assert first.try_acquire()[0]  # re-taking your own lease renews it


def test_an_expired_lease_is_taken_over_and_the_old_holder_learns_it_lost() -> None:
    api = FakeObjects()
    old, new = LeaseLock(api, "ns", "l", 1, info("old")), LeaseLock(api, "ns", "l", 1, info("new"))
    assert old.try_acquire()[0]
    lease = api.get(LEASE_API, "Lease", "ns", "l")
    assert lease is not None and not is_expired(lease)
    assert is_expired(lease, now=(expires_at(lease) or 0) + 0.1)
    time.sleep(1.2)
    taken, previous = new.try_acquire()
    assert taken and previous is not None and previous.id == "old"
    assert api.get(LEASE_API, "Lease", "ns", "l")["spec"]["leaseTransitions"] == 1  # type: ignore[index]
    assert not old.renew() and old.lost.is_set() and not old.still_held()


def test_release_frees_the_lease_only_for_its_holder() -> None:
    api = FakeObjects()
    holder, other = LeaseLock(api, "ns", "l", 10, info("a")), LeaseLock(api, "ns", "l", 10, info("b"))
    holder.try_acquire()
    other.release()  # not the holder: no effect
    assert holder_of(api.get(LEASE_API, "Lease", "ns", "l")) is not None
    holder.release()
    assert holder_of(api.get(LEASE_API, "Lease", "ns", "l")) is None
    assert other.try_acquire() == (True, None)


def test_renewal_keeps_the_lease_alive_past_its_duration() -> None:
    api = FakeObjects()
    lock = LeaseLock(api, "ns", "l", 1, info("a"))
    lock.try_acquire()
    lock.start_renewing()
    try:
        time.sleep(1.6)
        assert lock.still_held() and not is_expired(api.get(LEASE_API, "Lease", "ns", "l"))
    finally:
        lock.stop_renewing()


def _big_state(records: int) -> State:
    state = State.new("demo")
    for i in range(records):
        address = Address("c1", "", "ConfigMap", "ns", f"cm-{i}")
        state = state.with_record(ResourceRecord(address, "v1", uid=str(uuid.uuid4()), applied_hash=uuid.uuid4().hex))
    return state


def test_state_round_trips_whole_and_in_parts_and_old_parts_are_removed() -> None:
    api = FakeObjects()
    store = KubernetesStateStore(api, "ns", "st", part_size=1000)
    assert store.read() is None
    big = store.persist(_big_state(100))
    assert big.serial == 1
    parts, _ = api.list("v1", "Secret", "ns", "fleetplan.dev/state-of=st")
    assert len(parts) > 2
    assert KubernetesStateStore(api, "ns", "st").read() == big
    small = store.persist(State.new("demo"))
    assert small.serial == 2
    assert api.list("v1", "Secret", "ns", "fleetplan.dev/state-of=st")[0] == []
    assert KubernetesStateStore(api, "ns", "st").read() == small


def test_a_writer_that_lost_a_race_does_not_overwrite() -> None:
    api = FakeObjects()
    first, second = KubernetesStateStore(api, "ns", "st"), KubernetesStateStore(api, "ns", "st")
    first.persist(State.new("demo"))
    second.read()
    first.persist(State.new("demo"))
    with pytest.raises(StateError, match="changed by another writer"):
        second.persist(State.new("demo"))


def test_a_damaged_state_is_refused_with_a_hint() -> None:
    api = FakeObjects()
    store = KubernetesStateStore(api, "ns", "st")
    store.persist(State.new("demo"))
    secret = api.store[("Secret", "ns", "st")]
    secret["data"]["state.json.gz"] = base64.b64encode(b"not gzip").decode()
    with pytest.raises(StateError, match="checksum does not match"):
        KubernetesStateStore(api, "ns", "st").read()


def test_locking_the_store_refuses_a_second_locker_and_force_unlock_needs_the_id() -> None:
    api = FakeObjects()
    first, second = KubernetesStateStore(api, "ns", "st"), KubernetesStateStore(api, "ns", "st")
    held = first.lock("apply")
    with pytest.raises(LockedError, match=f"force-unlock {held.id}"):
        second.lock("apply")
    with pytest.raises(StateError, match="does not match"):
        second.force_unlock("wrong")
    assert second.force_unlock(held.id).id == held.id
    assert first._lock is not None and not first._lock.renew()  # it sees it lost the lock
    with pytest.raises(LockedError, match="lost the lock"):
        first.persist(State.new("demo"))
    assert second.lock("apply").id != held.id


def test_parts_orphaned_by_a_killed_writer_are_removed_by_the_next_write() -> None:
    api = FakeObjects()
    store = KubernetesStateStore(api, "ns", "st", part_size=1000)
    store.persist(State.new("demo"))
    orphan = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "st-9-0", "namespace": "ns", "labels": {"fleetplan.dev/state-of": "st"}},
              "data": {"part": ""}}
    api.create(orphan)  # written by a writer killed before its commit
    KubernetesStateStore(api, "ns", "st").persist(State.new("demo"))
    assert api.get("v1", "Secret", "ns", "st-9-0") is None
