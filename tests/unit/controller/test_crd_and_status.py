"""The generated CRD (staleness, structural rules), Fleet resources read through the models,
status conditions, and the controller's key queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Outcome, Status
from fleetplan.config.crd import fleet_crd, render_crd, spec_schema
from fleetplan.config.resources import fleet_from_resource, secret_refs
from fleetplan.controller import statuses
from fleetplan.controller.running import KeyQueue
from fleetplan.errors import ConfigError, Diagnostic
from fleetplan.plan.model import Action, Mode, Plan, Step

ROOT = Path(__file__).resolve().parents[3]
REGENERATE = "python3 -m fleetplan.config.crd > schemas/fleet.crd.yaml && cp schemas/fleet.crd.yaml " \
             "charts/fleetplan/crds/fleet.crd.yaml"


def test_checked_in_crd_is_current() -> None:
    assert (ROOT / "schemas" / "fleet.crd.yaml").read_text() == render_crd(), f"stale: run {REGENERATE}"
    assert (ROOT / "charts" / "fleetplan" / "crds" / "fleet.crd.yaml").read_text() == render_crd(), \
        f"the chart's copy is stale: run {REGENERATE}"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in (node.get("properties") or {}).items():
            out += _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += _walk(node["items"], path + "[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += _walk(node["additionalProperties"], path + "{}")
    return out


def test_crd_schema_is_structural() -> None:
    for path, node in _walk(spec_schema(), "spec"):
        assert "$ref" not in node and "anyOf" not in node and "const" not in node, path
        assert "default" not in node and "title" not in node, path
        assert node.get("type") or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path


def test_crd_spec_covers_every_fleet_yaml_field() -> None:
    spec = spec_schema()["properties"]
    assert {"stack", "version", "leader", "members", "resources", "state", "lifecycle"} <= set(spec)
    member = spec["members"]["items"]["properties"]
    assert member["kubeconfigSecret"]["properties"]["name"]["type"] == "string"
    assert spec["state"]["properties"]["leaseDuration"]["type"] == "string"
    crd = fleet_crd()
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def _resource(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"stack": "antrea", "version": "v2.2.0", "clusterSet": {"name": "s"},
                            "leader": {"name": "north", "kubeconfigSecret": {"name": "north-kc"}},
                            "members": [{"name": "west", "kubeconfigSecret": {"name": "west-kc", "key": "config"}}]}
    base.update(spec)
    return {"metadata": {"name": "demo", "namespace": "fleets"}, "spec": base}


def test_a_resource_reads_as_the_same_fleet_with_secret_kubeconfigs(tmp_path: Path) -> None:
    obj = _resource()
    assert secret_refs(obj) == {"north": ("north-kc", "kubeconfig"), "west": ("west-kc", "config")}
    paths = {"north": tmp_path / "n", "west": tmp_path / "w"}
    fleet = fleet_from_resource(obj, base_dir=tmp_path, kubeconfigs=paths, offline=True)
    assert fleet.name == "demo"
    assert [(c.name, c.kubeconfig) for c in fleet.clusters()] == [("north", paths["north"]), ("west", paths["west"])]


def test_resource_problems_name_the_resource_and_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        fleet_from_resource(_resource(stack="antra"), base_dir=tmp_path, offline=True)
    text = caught.value.diagnostics[0].render()
    assert text.startswith("Fleet fleets/demo: error: spec.stack:"), text


def _plan(*addresses: str) -> Plan:
    steps = tuple(Step(Address.parse(a), Action.CREATE, "new") for a in addresses)
    return Plan("demo", Mode.NORMAL, steps, None, 0, "")


def test_conditions_per_cluster_after_a_partly_failed_apply() -> None:
    plan = _plan("a/core/ConfigMap/x/one", "b/core/ConfigMap/x/one", "b/core/ConfigMap/x/two")
    summary = ApplySummary((
        Outcome(plan.steps[0], Status.OK),
        Outcome(plan.steps[1], Status.FAILED, error=Diagnostic("cluster b: forbidden")),
        Outcome(plan.steps[2], Status.SKIPPED, root_cause=plan.steps[1].address),
    ))
    got = {c.type: c for c in statuses.applied(["a", "b"], plan, summary)}
    assert got["clusters.fleetplan.dev/a"].status == "True"
    assert got["clusters.fleetplan.dev/b"].status == "False"
    assert got["clusters.fleetplan.dev/b"].message == "cluster b: forbidden"
    assert got["Ready"].status == "False" and got["Degraded"].status == "True"
    assert got["Degraded"].message == "not converged: b"
    assert statuses.plan_summary(plan, summary)["summary"].endswith("1 added, 0 changed, 0 destroyed, 1 failed.")


def test_conditions_when_nothing_could_be_planned() -> None:
    got = {c.type: c for c in statuses.failed(["a", "b"], "PlanFailed", [Diagnostic("cluster b: unreachable")])}
    assert got["clusters.fleetplan.dev/b"].status == "False"
    assert got["clusters.fleetplan.dev/a"].status == "Unknown"
    assert got["Ready"].status == "False" and got["Degraded"].reason == "PlanFailed"


def test_transition_time_moves_only_when_the_status_flips() -> None:
    before = statuses.merge_conditions([], [statuses.Condition("Ready", "True", "Converged")], 1, now="T1")
    same = statuses.merge_conditions(before, [statuses.Condition("Ready", "True", "Converged")], 2, now="T2")
    flipped = statuses.merge_conditions(same, [statuses.Condition("Ready", "False", "ApplyFailed")], 3, now="T3")
    assert [c["lastTransitionTime"] for c in (*before, *same, *flipped)] == ["T1", "T1", "T3"]
    assert same[0]["observedGeneration"] == 2


def test_key_queue_holds_each_key_once_and_honours_delays() -> None:
    queue = KeyQueue()
    queue.add(("ns", "a"), after=0.3)
    queue.add(("ns", "b"))
    queue.add(("ns", "b"))
    queue.add(("ns", "a"), after=5.0)  # a later due time does not postpone an earlier one
    assert queue.pop(0.1) == ("ns", "b")
    assert queue.pop(0.05) is None
    started = time.monotonic()
    assert queue.pop(2.0) == ("ns", "a")
    assert 0.1 < time.monotonic() - started < 1.0
    assert queue.pop(0.05) is None
