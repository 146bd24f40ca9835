"""Pure CPU: render, build the graph, diff and plan a large fleet from in-memory snapshots.

No cluster and no network: the fleet is the benchmark's scale fleet (same workload, 1,000 members
by default), loaded with `load_fleet(offline=True)`; the clusters' contents are a `Snapshot` built
in memory. Two plans are timed:

- cold: nothing exists and there is no state, so every resource is a create (graph, ordering,
  rendering of additions);
- converged: every object exists as fleetplan last applied it, with server-style metadata and
  `managedFields` for manager `fleetplan`, and the state records it; the dry-run stand-in returns
  the live object, so every resource goes through the diff on managed fields.

CPU time is `time.process_time()` of this process (all threads) around each phase.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalefleet import Endpoint, write_fleet

from fleetplan.config.loading import load_fleet
from fleetplan.graph.building import build_graph
from fleetplan.live.reading import Snapshot, owned_body
from fleetplan.plan import bodies, fleets
from fleetplan.plan.model import Action, Plan
from fleetplan.plan.planning import Options, decide
from fleetplan.state.model import ResourceRecord, State


@dataclass(frozen=True)
class CpuResult:
    members: int
    resources: int
    load_s: float  # reading and validating fleet.yaml (not part of the target)
    render_s: float  # stacks -> desired resources
    graph_s: float
    cold_plan_s: float  # decide() with nothing live
    converged_plan_s: float  # decide() with everything live and recorded
    cold_steps: int  # steps that would change something (sanity: every resource)
    converged_changes: int  # sanity: 0

    @property
    def plan_cpu_s(self) -> float:
        """What the target bounds: the graph and the slower of the two plans (diff included)."""
        return self.graph_s + max(self.cold_plan_s, self.converged_plan_s)

    @property
    def with_render_s(self) -> float:
        """The same plus rendering the stacks from fleet.yaml's manifests (YAML parsing)."""
        return self.render_s + self.plan_cpu_s


def measure_planning(members: int = 1000, repeats: int = 3) -> CpuResult:
    with tempfile.TemporaryDirectory() as tmp:
        endpoints = [Endpoint(f"lab{i}", "", "", "") for i in (1, 2, 3)]
        fleet_dir = write_fleet(Path(tmp), "cpu", members, endpoints, in_memory=True)
        load_s, fleet = _timed(lambda: load_fleet(fleet_dir.fleet_file, offline=True))
        rounds = [_round(fleet) for _ in range(max(1, repeats))]
    render_s, graph_s, cold_s, converged_s = (statistics.median(r[0][i] for r in rounds) for i in range(4))
    resources, cold, converged = rounds[-1][1]
    return CpuResult(
        members, resources, load_s, render_s, graph_s, cold_s, converged_s,
        cold_steps=sum(1 for s in cold.steps if s.action == Action.CREATE),
        converged_changes=sum(1 for s in converged.steps if s.action != Action.NOOP),
    )


def _round(fleet: Any) -> tuple[tuple[float, float, float, float], tuple[int, Plan, Plan]]:
    """One timed pass: render, graph, cold plan, converged plan."""
    render_s, desired = _timed(lambda: fleets.desired_for(fleet, ("resources",)))
    graph_s, graph = _timed(lambda: build_graph(desired.resources))
    live, state = _converged(desired.fleet_name, desired.resources)
    cold_s, cold = _timed(lambda: decide(desired, graph, None, Snapshot(), _no_dry_run))
    converged_s, converged = _timed(
        lambda: decide(desired, graph, state, Snapshot(owned=live), _echo(live), Options()))
    return (render_s, graph_s, cold_s, converged_s), (len(desired.resources), cold, converged)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def _no_dry_run(address: Any, body: Any) -> Any:
    raise AssertionError(f"a cold plan must not dry-run {address}")


def _echo(live: Mapping[Any, dict[str, Any]]) -> Callable[[Any, Any], dict[str, Any]]:
    """A dry-run stand-in for a converged fleet: applying the body changes nothing."""
    return lambda address, body: live[address]


def _converged(fleet: str, resources: Any) -> tuple[dict[Any, dict[str, Any]], State]:
    live: dict[Any, dict[str, Any]] = {}
    records: dict[Any, ResourceRecord] = {}
    lineage = str(uuid.uuid4())  # what apply stamps on every object it creates, as live objects carry it
    for resource in resources:
        body = owned_body(resource.body, fleet, lineage)
        uid = str(uuid.uuid4())
        obj = dict(body)
        obj["metadata"] = {
            **body["metadata"],
            "uid": uid,
            "resourceVersion": "1000",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "fleetplan", "operation": "Apply", "apiVersion": body["apiVersion"],
                               "fieldsType": "FieldsV1", "fieldsV1": _fields_of(body, top=True)}],
        }
        live[resource.address] = obj
        records[resource.address] = ResourceRecord(
            resource.address, str(body["apiVersion"]), uid=uid, applied_hash=bodies.body_hash(body))
    return live, State(lineage=lineage, fleet=fleet, serial=1, resources=records)


def _fields_of(value: Any, top: bool = False) -> dict[str, Any]:
    """The fieldsV1 trie server-side apply records for `value` (lists as atomic leaves)."""
    if not isinstance(value, dict):
        return {}
    skip = {"apiVersion", "kind"} if top else set()
    out: dict[str, Any] = {}
    for key, sub in value.items():
        if key in skip or (top and key == "metadata"):
            continue
        out[f"f:{key}"] = _fields_of(sub)
    if top:
        metadata = value.get("metadata", {})
        out["f:metadata"] = {f"f:{part}": {f"f:{k}": {} for k in metadata.get(part) or {}}
                             for part in ("labels", "annotations") if metadata.get(part)}
    return out
