"""A plan's server-side dry-runs run together (bounded per cluster), and decide exactly as one by one."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping
from typing import Any

from kit.fakes import MemoryCluster

from fleetplan.addrs import Address
from fleetplan.errors import ClusterError
from fleetplan.live import reading
from fleetplan.live.clusters import Obj
from fleetplan.plan import planning
from fleetplan.plan.model import Action
from fleetplan.stacks.desired import DesiredFleet, DesiredResource
from fleetplan.state import model

FLEET = "demo"
LINEAGE = "lineage-1"


class SlowCluster(MemoryCluster):
    """Holds ConfigMaps that fleetplan applied earlier with other data; each dry-run takes 50 ms."""

    def __init__(self, name: str, names: list[str], gauge: dict[str, int], lock: threading.Lock,
                 immutable: set[str] | None = None) -> None:
        super().__init__(name)
        self.gauge, self.lock, self.immutable = gauge, lock, immutable or set()
        self.objects = {n: reading.owned_body(_body(n, "old"), FLEET, LINEAGE) for n in names}
        for n, obj in self.objects.items():
            obj["metadata"]["uid"] = f"uid-{name}-{n}"
            obj["metadata"]["managedFields"] = [{"manager": "fleetplan", "operation": "Apply",
                                                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:value": {}}}}]

    def apply(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        assert dry_run, "planning never writes"
        name = body["metadata"]["name"]
        with self.lock:
            self.gauge["now"] += 1
            self.gauge["peak"] = max(self.gauge["peak"], self.gauge["now"])
            self.gauge[self.name] = self.gauge.get(self.name, 0) + 1
            self.gauge["peak " + self.name] = max(self.gauge.get("peak " + self.name, 0), self.gauge[self.name])
        try:
            time.sleep(0.05)
            if name in self.immutable:
                raise ClusterError(f"cluster {self.name}: dry-run apply ConfigMap {name}: field is immutable")
            merged = copy.deepcopy(self.objects[name])
            merged["data"] = dict(body.get("data") or {})
            return merged
        finally:
            with self.lock:
                self.gauge["now"] -= 1
                self.gauge[self.name] -= 1


def _body(name: str, value: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps"},
            "data": {"value": value}}


def _scenario(per_cluster: int, immutable: set[str] | None = None) -> tuple[DesiredFleet, dict[str, SlowCluster],
                                                                           model.State, dict[str, int]]:
    gauge, lock = {"now": 0, "peak": 0}, threading.Lock()
    names = [f"cm{i}" for i in range(per_cluster)]
    clusters = {c: SlowCluster(c, names, gauge, lock, immutable) for c in ("c1", "c2", "c3")}
    resources, state = [], model.State.new(FLEET)
    state = model.State(lineage=LINEAGE, fleet=FLEET, serial=1, resources={}, journal=())
    for cluster in clusters.values():
        for n in names:
            address = Address(cluster.name, "", "ConfigMap", "apps", n)
            resources.append(DesiredResource(address, _body(n, "new")))
            state = state.with_record(model.ResourceRecord(address, "v1", uid=f"uid-{cluster.name}-{n}",
                                                           applied_hash="sha256:old"))
    return DesiredFleet(FLEET, tuple(resources)), clusters, state, gauge


def test_dry_runs_run_together_bounded_per_cluster_and_decide_as_one_by_one() -> None:
    desired, clusters, state, gauge = _scenario(per_cluster=12)
    started = time.monotonic()
    plan = planning.plan_fleet(desired, clusters, state)
    elapsed = time.monotonic() - started
    updates = [s for s in plan.steps if s.action == Action.UPDATE]
    assert len(updates) == 36 and all(s.reason == "configuration changed" for s in updates)
    values = {(c.before, c.after) for s in updates for c in s.changes if c.path == "data.value"}
    assert values == {("old", "new")} and all(any(c.path == "data.value" for c in s.changes) for s in updates)
    assert gauge["peak"] > 10  # the three clusters at once
    assert max(gauge[f"peak c{i}"] for i in (1, 2, 3)) == planning._DRY_RUNS_PER_CLUSTER
    assert elapsed < 36 * 0.05 / 2, elapsed  # one by one would take 1.8 s


def test_an_immutable_field_found_by_a_parallel_dry_run_still_means_replace() -> None:
    desired, clusters, state, _ = _scenario(per_cluster=3, immutable={"cm1"})
    plan = planning.plan_fleet(desired, clusters, state)
    actions = {str(s.address): s.action for s in plan.steps}
    assert actions == {f"c{i}/core/ConfigMap/apps/cm{j}": (Action.REPLACE if j == 1 else Action.UPDATE)
                       for i in (1, 2, 3) for j in range(3)}
    replaced = plan.step(Address("c2", "", "ConfigMap", "apps", "cm1"))
    assert replaced is not None and "immutable" in replaced.reason
