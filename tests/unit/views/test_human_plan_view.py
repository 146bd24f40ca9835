"""The human plan view: nested attributes one per line, large values collapsed, secrets masked,
and the JSON view complete. Golden file: tests/golden/plan-nested.txt (update with
FLEETPLAN_UPDATE_GOLDEN=1 after reading the new output)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fleetplan.addrs import Address
from fleetplan.diff.changes import KNOWN_AFTER_APPLY, SENSITIVE, SENSITIVE_KNOWN_AFTER_APPLY, FieldChange
from fleetplan.plan import blocks, rendering
from fleetplan.plan.model import Action, Mode, Plan, Step

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def _crd_versions(count: int) -> list[dict[str, Any]]:
    schema = {"openAPIV3Schema": {"type": "object", "properties": {
        f"field{i}": {"type": "string", "description": "x" * 200} for i in range(40)}}}
    return [{"name": f"v1alpha{i}", "served": True, "storage": i == 0, "schema": schema} for i in range(count)]


def nested_plan() -> Plan:
    crd_body = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.io", "labels": {"app.kubernetes.io/part-of": "demo"}},
        "spec": {"group": "example.io", "names": {"kind": "Thing", "plural": "things"}, "scope": "Namespaced",
                 "versions": _crd_versions(3)},
    }
    deploy_body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "apps", "labels": {"app.kubernetes.io/name": "web"}},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "web:2", "args": ["--port=80"]}]}}},
    }
    secret_body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "member-token", "namespace": "kube-system"},
                   "data": {"token": "placeholder", "namespace": "YW50cmVh"}}
    config_body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "apps"},
                   "data": {"config.yaml": "port: 80\nlevel: info\n", "blob": "q" * 500}}
    return Plan("demo", Mode.NORMAL, (
        Step(Address.parse("north/apiextensions.k8s.io/CustomResourceDefinition/-/things.example.io"),
             Action.CREATE, "not on the cluster", body=crd_body,
             changes=(FieldChange("metadata", None, crd_body["metadata"]),
                      FieldChange("spec", None, crd_body["spec"]))),
        Step(Address.parse("west/core/ConfigMap/apps/settings"), Action.CREATE, "not on the cluster",
             body=config_body, changes=(FieldChange("data", None, config_body["data"]),
                                        FieldChange("metadata", None, config_body["metadata"]))),
        Step(Address.parse("west/apps/Deployment/apps/web"), Action.UPDATE, "configuration changed",
             body=deploy_body, changes=(
                 FieldChange("metadata.labels.app.kubernetes.io/name", "api", "web"),
                 FieldChange("metadata.labels.app.kubernetes.io/version", "1", None),
                 FieldChange("spec.replicas", 3, None),
                 FieldChange("spec.template.spec.containers[name=app].args[0]", "--port=8080", "--port=80"),
                 FieldChange("spec.template.spec.containers[name=app].image", "web:1", "web:2"),
             )),
        Step(Address.parse("west/core/Secret/kube-system/member-token"), Action.CREATE, "not on the cluster",
             body=secret_body, changes=(
                 FieldChange("data", None, SENSITIVE),
                 FieldChange("data.token", None, SENSITIVE_KNOWN_AFTER_APPLY),
                 FieldChange("metadata", None, secret_body["metadata"]),
                 FieldChange("type", None, "Opaque"),
             )),
        Step(Address.parse("west/multicluster.crd.antrea.io/ClusterSet/kube-system/set"), Action.UPDATE,
             "a value from north/core/ServiceAccount/ns/sa changes",
             changes=(FieldChange("spec.leaders[0].server", "https://a:6443", KNOWN_AFTER_APPLY),)),
    ), "lineage-1", 3, "sha256:abc", created_at="2026-01-01T00:00:00+00:00")


def test_nested_view_matches_golden_file() -> None:
    got = rendering.render_human(nested_plan())
    path = GOLDEN / "plan-nested.txt"
    if os.environ.get("FLEETPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert got == path.read_text()


def test_creates_nest_one_attribute_per_line_and_collapse_large_values() -> None:
    text = rendering.render_human(nested_plan())
    attributes = [line for line in text.splitlines() if line.startswith("      ")]
    assert max(len(line) for line in attributes) < 80  # no whole object on one line
    assert '          + kind   = "Thing"' in text
    assert re.search(r"\+ versions = \(3 versions, \d+\.\d KiB, collapsed\)", text)
    assert "+ blob = (string, 500 B, collapsed)" in text
    assert '+ "config.yaml" = <<-EOT\n                port: 80\n                level: info\n            EOT' in text
    assert rendering.COLLAPSED_NOTE in text
    assert "x" * 200 not in text


def test_updates_show_only_changed_leaves_with_dotted_keys_intact() -> None:
    text = rendering.render_human(nested_plan())
    assert '~ "app.kubernetes.io/name"    = "api" -> "web"' in text
    assert '- "app.kubernetes.io/version" = "1"' in text
    assert "~ containers[name=app] {" in text
    assert '~ image   = "web:1" -> "web:2"' in text
    assert "- replicas = 3" in text
    assert '~ leaders[0] {\n              ~ server = "https://a:6443" -> (known after apply)' in text


def test_sensitive_values_stay_masked_and_cover_their_children() -> None:
    text = rendering.render_human(nested_plan())
    assert "+ data = (sensitive value)" in text
    assert "YW50cmVh" not in text and "placeholder" not in text
    secret = text.split("member-token will be created")[1].split("\n\n")[0]
    assert "token" not in secret.split("+ data")[1].split("\n")[0]


def test_json_view_stays_complete() -> None:
    document = json.loads(rendering.render_json(nested_plan()))
    crd = document["resource_changes"][0]
    spec = next(c for c in crd["changes"] if c["path"] == "spec")
    assert len(spec["after"]["versions"]) == 3
    properties = spec["after"]["versions"][2]["schema"]["openAPIV3Schema"]["properties"]
    assert properties["field39"]["description"] == "x" * 200


def test_split_path_uses_the_body_to_keep_dotted_keys_whole() -> None:
    body = {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}, "spec": {"ports": [{"name": "web"}]}}
    assert blocks.split_path("metadata.labels.app.kubernetes.io/name", body) == [
        "metadata", "labels", "app.kubernetes.io/name"]
    assert blocks.split_path("spec.ports[name=web].port", body) == ["spec", "ports[name=web]", "port"]
    assert blocks.split_path("metadata.labels.gone.example/key", body) == ["metadata", "labels", "gone.example/key"]
    assert blocks.split_path("data.color", None) == ["data", "color"]


def test_colour_paints_only_symbols() -> None:
    text = rendering.render_human(nested_plan(), color=True)
    assert "\033[32m+\033[0m versions = (3 versions" in text
    assert "\033[" not in rendering.render_human(nested_plan())
