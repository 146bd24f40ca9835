"""kit.fleets: the CLI environment offline, and a `stack: none` resources fleet that really
plans, applies, changes and destroys on the lab through the CLI (so the shared scaffolding cannot
rot while the suites that use it test something else)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kit.fleets import PARTS, RBAC_PARTS, ROOT, ResourcesFleet, cli_env, fleet_yaml, manifests, template


def test_cli_env_is_offline_and_free_of_ambient_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"HTTPS_PROXY": "http://proxy.invalid:3128", "no_proxy": "*", "KUBECONFIG": "/nope",
                        "FLEETPLAN_DEBUG": "1", "FLEETPLAN_TEST_KILL_AT": "x", "FLEETPLAN_TEST_HOOKS": "1",
                        "PYTHONPATH": "/elsewhere"}.items():
        monkeypatch.setenv(name, value)
    env = cli_env({"EXTRA": "1"})
    assert not [k for k in env if "proxy" in k.lower()]
    assert not {"KUBECONFIG", "FLEETPLAN_DEBUG", "FLEETPLAN_TEST_KILL_AT", "FLEETPLAN_TEST_HOOKS"} & set(env)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    assert Path(env["FLEETPLAN_MIRROR"]).is_absolute() and env["EXTRA"] == "1"


def test_a_kill_point_given_to_cli_env_switches_the_test_hooks_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETPLAN_TEST_HOOKS", raising=False)
    env = cli_env({"FLEETPLAN_TEST_KILL_AT": "finish:1"})
    assert (env["FLEETPLAN_TEST_KILL_AT"], env["FLEETPLAN_TEST_HOOKS"]) == ("finish:1", "1")


def test_manifests_join_the_named_parts_in_one_namespace() -> None:
    from ruamel.yaml import YAML

    app = list(YAML(typ="safe").load_all(manifests("n1", "red")))
    assert [d["kind"] for d in app] == ["Namespace", "ConfigMap", "ServiceAccount", "Deployment"]
    assert app[1]["data"]["color"] == "red"
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in app} == {"n1"}
    rbac = list(YAML(typ="safe").load_all(manifests("n1", "red", *RBAC_PARTS)))
    assert [d["kind"] for d in rbac] == ["Role", "RoleBinding"]
    assert rbac[1]["subjects"][0] == {"kind": "ServiceAccount", "name": "robot", "namespace": "n1"}


def test_the_smaller_parts_and_the_template() -> None:
    from ruamel.yaml import YAML

    docs = list(YAML(typ="safe").load_all(
        manifests("n2", "teal", "configmap-color", "deployment", "deployment-unschedulable")))
    assert docs[0]["data"] == {"color": "teal"} and docs[0]["metadata"]["name"] == "settings"
    web, stuck = (d["spec"]["template"]["spec"] for d in docs[1:])
    assert [d["metadata"]["name"] for d in docs[1:]] == ["web", "stuck"]
    assert "nodeSelector" not in web and web["containers"][0]["image"] == "registry.example/web:1.0"
    assert stuck["nodeSelector"] == {"fleetplan.dev/no-such-node": "true"}
    assert docs[2]["spec"]["selector"] == {"matchLabels": {"app": "stuck"}}
    assert template("namespace", "role") == PARTS["namespace"] + "---\n" + PARTS["role"]
    assert template().format(ns="n3", color="red") == manifests("n3", "red")


class _Cluster:
    def __init__(self, name: str) -> None:
        self.name, self.kubeconfig, self.context = name, f"/k/{name}.yaml", name


def test_fleet_yaml_leads_with_the_first_cluster_and_honours_overrides() -> None:
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load(fleet_yaml("f1", [_Cluster("a"), _Cluster("b"), _Cluster("c")],
                                           kubeconfigs={"b": "/bad.yaml"}, wait_timeout="5s"))
    spec = doc["spec"]
    assert (doc["metadata"]["name"], spec["stack"], spec["wait"]["timeout"]) == ("f1", "none", "5s")
    assert spec["leader"] == {"name": "a", "kubeconfig": "/k/a.yaml", "context": "a"}
    assert [(m["name"], m["kubeconfig"]) for m in spec["members"]] == [("b", "/bad.yaml"), ("c", "/k/c.yaml")]
    assert spec["resources"] == [{"clusters": "all", "path": "./extras/"}]
    assert "version" not in spec and "clusterSet" not in spec and "state" not in spec


def test_fleet_yaml_may_name_the_antrea_stack_and_a_state_backend() -> None:
    from ruamel.yaml import YAML

    spec = YAML(typ="safe").load(fleet_yaml("f2", [_Cluster("a"), _Cluster("b")], stack="antrea",
                                            state="{backend: kubernetes, namespace: s1}"))["spec"]
    assert (spec["stack"], spec["version"], spec["clusterSet"]) == ("antrea", "v2.2.0", {"name": "f2-set"})
    assert [m["name"] for m in spec["members"]] == ["b"]
    assert spec["state"] == {"backend": "kubernetes", "namespace": "s1"}


@pytest.mark.integration
def test_resources_fleet_applies_changes_and_destroys_through_the_cli(tmp_path: Path, lab: Any) -> None:
    fleet = ResourcesFleet(tmp_path, lab, prefix="k")
    try:
        assert fleet.plan_json()["summary"] == {"add": 18, "change": 0, "destroy": 0}
        fleet.run("apply", "--auto-approve")
        live = fleet.owned_live()
        assert len(live) == fleet.expected_count == 18
        assert {r["address"]: r.get("uid") for r in fleet.state()["resources"]} == live
        fleet.write_manifests(color="green", rbac=False)
        assert fleet.plan_json()["summary"] == {"add": 0, "change": 3, "destroy": 6}
    finally:
        fleet.destroy()
    assert fleet.owned_live() == {}
    assert fleet.state()["resources"] == []
