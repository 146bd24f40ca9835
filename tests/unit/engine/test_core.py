"""Pure engine behaviour with small fakes: graph edges and cycles, state files and locks, the
managed-fields diff, the walker's skipping and root causes, and saved-plan staleness."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Hook, Outcome, Status
from fleetplan.apply.walking import walk_plan
from fleetplan.diff import comparing
from fleetplan.errors import ClusterError, LockedError, PlanError, StateError
from fleetplan.graph.building import build_graph
from fleetplan.live.handlers import Result
from fleetplan.plan import planfile, rendering
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import DesiredResource, Ref
from fleetplan.state import model
from fleetplan.state.storing import LocalStateStore

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def res(text: str, body: dict | None = None, deps: tuple[str, ...] = ()) -> DesiredResource:
    a = Address.parse(text)
    return DesiredResource(a, body or {"metadata": {"name": a.name}},
                           depends_on=frozenset(Address.parse(d) for d in deps))


def test_implicit_edges_order_crd_namespace_account_role_and_refs() -> None:
    crd = res("w/apiextensions.k8s.io/CustomResourceDefinition/-/things.x.io",
              {"spec": {"group": "x.io", "names": {"kind": "Thing"}}})
    graph = build_graph([
        res("w/x.io/Thing/ns/t"), crd, res("w/core/Namespace/-/ns"), res("w/core/ServiceAccount/ns/sa"),
        res("w/rbac.authorization.k8s.io/Role/ns/r"),
        res("w/rbac.authorization.k8s.io/RoleBinding/ns/rb", {
            "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
        res("e/core/Secret/ns/copy", {"data": {"token": Ref(Address.parse("w/core/ServiceAccount/ns/sa"), "t")}}),
    ])
    order = [str(a) for a in graph.creation_order()]
    assert order.index(str(crd.address)) < order.index("w/x.io/Thing/ns/t")
    assert order.index("w/core/Namespace/-/ns") < order.index("w/core/ServiceAccount/ns/sa")
    rb = Address.parse("w/rbac.authorization.k8s.io/RoleBinding/ns/rb")
    assert graph.dependencies(rb) == {Address.parse("w/core/ServiceAccount/ns/sa"),
                                      Address.parse("w/rbac.authorization.k8s.io/Role/ns/r"),
                                      Address.parse("w/core/Namespace/-/ns")}
    assert Address.parse("w/core/ServiceAccount/ns/sa") in graph.dependencies(Address.parse("e/core/Secret/ns/copy"))
    assert graph.deletion_order() == tuple(reversed(graph.creation_order()))


def test_cycle_error_names_every_address_on_it() -> None:
    with pytest.raises(PlanError, match=r"dependency cycle: w/core/ConfigMap/-/a -> w/core/ConfigMap/-/b -> "
                                        r"w/core/ConfigMap/-/a"):
        build_graph([res("w/core/ConfigMap/-/a", deps=("w/core/ConfigMap/-/b",)),
                     res("w/core/ConfigMap/-/b", deps=("w/core/ConfigMap/-/a",))])


def test_state_round_trip_serial_backup_and_damage(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    assert store.read() is None
    state = model.State.new("demo").with_record(model.ResourceRecord(Address.parse("w/core/Secret/ns/x"), "v1",
                                                                     secret_hashes={"token": model.secret_hash("t")}))
    first = store.persist(state)
    second = store.persist(first.without(Address.parse("w/core/Secret/ns/x")))
    assert (first.serial, second.serial) == (1, 2)
    assert json.loads((tmp_path / "s.json.backup").read_text())["serial"] == 1
    assert LocalStateStore(tmp_path / "s.json").read() == second
    (tmp_path / "s.json").write_text((tmp_path / "s.json").read_text()[:40])
    with pytest.raises(StateError, match=r"not valid JSON.*truncated"):
        LocalStateStore(tmp_path / "s.json").read()
    (tmp_path / "s.json").write_text(json.dumps({**model.to_dict(second), "format_version": 99}))
    with pytest.raises(StateError, match="newer fleetplan"):
        LocalStateStore(tmp_path / "s.json").read()


def test_lock_names_holder_and_force_unlock_needs_the_id(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    held = store.lock("apply")
    with pytest.raises(LockedError, match=rf"pid {os.getpid()}.*lock ID {held.id}"):
        LocalStateStore(tmp_path / "s.json").lock("apply")
    with pytest.raises(StateError, match="does not match"):
        store.force_unlock("wrong")
    assert store.force_unlock(held.id).id == held.id
    store.lock("apply")  # free again


def test_dead_holder_lock_is_taken_over(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    info = store.lock("apply")
    data = json.loads(store.lock_path.read_text())
    store.lock_path.write_text(json.dumps({**data, "pid": 2**22 + 12345}))
    other = LocalStateStore(tmp_path / "s.json")
    assert other.lock("apply").id != info.id
    assert "no longer runs" in other.warnings[0].summary


def test_diff_sees_only_managed_fields_and_masks_secrets() -> None:
    managed = [{"manager": "fleetplan", "operation": "Apply",
                "fieldsV1": {"f:data": {"f:token": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}}]
    live = {"apiVersion": "v1", "kind": "Secret", "data": {"token": "b2xk"},
            "metadata": {"labels": {"a": "1"}, "annotations": {"ca-bundle": "x"}, "managedFields": managed}}
    merged = {**live, "data": {"token": "bmV3"},
              "metadata": {**live["metadata"], "annotations": {"ca-bundle": "changed-by-other"}}}
    changes = comparing.compare(live, merged)
    assert [(c.path, c.before, c.after) for c in changes] == [
        ("data.token", "(sensitive value)", "(sensitive value) (changed)")]
    assert "b2xk" not in repr(changes) and "bmV3" not in repr(changes)


def _step(name: str, deps: tuple[str, ...] = (), action: Action = Action.CREATE) -> Step:
    return Step(Address.parse(f"w/core/ConfigMap/ns/{name}"), action, "test",
                depends_on=tuple(Address.parse(f"w/core/ConfigMap/ns/{d}") for d in deps))


class FakeExecutor:
    def __init__(self, fail: set[str]) -> None:
        self.fail, self.ran = fail, []

    def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
        self.ran.append(step.address.name)
        if step.address.name in self.fail:
            raise ClusterError(f"boom {step.address.name}")
        return Result()


def test_walker_skips_dependents_and_reports_root_causes() -> None:
    plan = Plan("demo", Mode.NORMAL, (_step("a"), _step("b", ("a",)), _step("c", ("b",)), _step("d")), None, 0, "")
    executor = FakeExecutor({"a"})
    summary = walk_plan(plan, executor, Hook(), parallelism=2)
    assert sorted(executor.ran) == ["a", "d"]
    assert [o.step.address.name for o in summary.failures] == ["a"]
    assert {o.step.address.name: str(o.root_cause) for o in summary.skipped} == {
        "b": "w/core/ConfigMap/ns/a", "c": "w/core/ConfigMap/ns/a"}
    assert next(o for o in summary.outcomes if o.step.address.name == "d").status == Status.OK


def _sample_plan() -> Plan:
    from fleetplan.diff.changes import FieldChange

    return Plan("demo", Mode.NORMAL, (
        Step(Address.parse("west/core/ConfigMap/apps/settings"), Action.UPDATE, "configuration changed",
             api_version="v1", changes=(FieldChange("data.color", "blue", "green"),)),
        Step(Address.parse("west/core/Secret/apps/creds"), Action.CREATE, "not on the cluster", api_version="v1",
             body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "data": {"pw": "c2VjcmV0"}},
             changes=(FieldChange("data", None, "(sensitive value)"),)),
        Step(Address.parse("east/apps/Deployment/apps/old"), Action.DELETE, "removed from the configuration"),
    ), "lineage-1", 7, "sha256:abc", created_at="2026-01-01T00:00:00+00:00")


def test_saved_plan_has_no_secret_and_detects_staleness(tmp_path: Path) -> None:
    plan = _sample_plan()
    planfile.save(plan, tmp_path / "p")
    text = (tmp_path / "p").read_text()
    assert "c2VjcmV0" not in text and oct((tmp_path / "p").stat().st_mode & 0o777) == "0o600"
    loaded = planfile.load(tmp_path / "p")
    state = model.State("lineage-1", "demo", serial=7)
    planfile.check_fresh(loaded, state, "sha256:abc")
    with pytest.raises(PlanError, match="serial 7 -> 8"):
        planfile.check_fresh(loaded, model.State("lineage-1", "demo", serial=8), "sha256:abc")
    with pytest.raises(PlanError, match="clusters changed"):
        planfile.check_fresh(loaded, state, "sha256:other")
    first_run = Plan("demo", Mode.NORMAL, (), None, 0, "sha256:abc")
    with pytest.raises(PlanError, match="no state existed"):
        planfile.check_fresh(first_run, state, "sha256:abc")
    restored = planfile.restore_secrets(loaded, {Address.parse("west/core/Secret/apps/creds"): {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "data": {"pw": "c2VjcmV0"}}})
    assert restored.steps[1].body == plan.steps[1].body


@pytest.mark.parametrize(("name", "render"), [
    ("plan.txt", lambda p: rendering.render_human(p)),
    ("plan.json", lambda p: rendering.render_json(p)),
    ("no-changes.txt", lambda p: rendering.render_human(Plan("demo", Mode.NORMAL, (), None, 0, ""))),
])
def test_views_match_golden_files(name: str, render: Callable[[Plan], str]) -> None:
    """Update with FLEETPLAN_UPDATE_GOLDEN=1 after checking the new output by eye."""
    got = render(_sample_plan())
    path = GOLDEN / name
    if os.environ.get("FLEETPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert got == path.read_text()
    assert "c2VjcmV0" not in got


class RecordingHook(Hook):
    def __init__(self) -> None:
        self.finished: list[tuple[str, Status]] = []
        self.plan_done = False

    def step_finished(self, outcome: Outcome) -> None:
        self.finished.append((outcome.step.address.name, outcome.status))

    def plan_finished(self, summary: ApplySummary) -> None:
        self.plan_done = True


class BuggyExecutor(FakeExecutor):
    def execute(self, step: Step, progress: Callable[[str], None]) -> Result:
        self.ran.append(step.address.name)
        if step.address.name == "a":
            raise KeyError("status")  # a handler bug, not a FleetplanError
        return Result()


def test_any_exception_from_a_step_is_its_failure_and_the_walk_goes_on() -> None:
    plan = Plan("demo", Mode.NORMAL, (_step("a"), _step("b", ("a",)), _step("d")), None, 0, "")
    hook = RecordingHook()
    summary = walk_plan(plan, BuggyExecutor(set()), hook, parallelism=1)
    assert sorted(hook.finished) == [("a", Status.FAILED), ("b", Status.SKIPPED), ("d", Status.OK)]
    assert hook.plan_done
    error = summary.failures[0].error
    assert error is not None and error.summary == "internal error: KeyError: 'status'"
    assert error.address == "w/core/ConfigMap/ns/a"
