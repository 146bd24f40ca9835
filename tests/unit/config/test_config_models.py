"""The loaded model: typed values, defaults, path resolution, the cluster list, frozenness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_cases import BASE
from pydantic import ValidationError

from fleetplan.config import format_duration, load_fleet, parse_duration
from fleetplan.config.schema import render_reference, render_schema
from fleetplan.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("7d", 604800), ("1d2h3m4s", 93784)],
)
def test_durations_parse_to_seconds_and_back(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "0s", "0h0m", "1.5h", "h", "30m1h", "1H", "24", "-1h", "1h 30m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_defaults_and_typed_values(tmp_path: Path) -> None:
    fleet = load_fleet(_write(tmp_path, BASE), offline=True)
    spec = fleet.spec
    assert (
        spec.tokens.strategy,
        spec.tokens.kind,
        spec.tokens.ttl_seconds,
        spec.tokens.rotate_before_seconds,
    ) == ("per-member", "bound", 86400, 21600)
    assert spec.wait.timeout_seconds == 300
    assert spec.cluster_set.namespace == "antrea-multicluster"
    assert spec.antrea.member_namespace == "kube-system"
    assert spec.ocm.bootstrap_token.ttl_seconds == 3600
    assert spec.ocm.klusterlet.mode == "Default"
    assert spec.state.backend == "local"
    assert fleet.state_path(tmp_path) == tmp_path / "state" / "demo.json"


def test_paths_expand_home_and_env_and_resolve_against_the_fleet_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_KUBE_DIR", "/srv/kube")
    monkeypatch.setenv("HOME", "/home/op")
    sub = tmp_path / "team"
    sub.mkdir()
    text = (
        BASE.replace("./north.yaml", "~/north.yaml")
        .replace("./west.yaml", "${FLEET_KUBE_DIR}/west.yaml")
        .replace("./east.yaml", "../shared/east.yaml")
    )
    fleet = load_fleet(_write(sub, text), offline=True)
    assert [str(c.kubeconfig) for c in fleet.clusters()] == [
        "/home/op/north.yaml",
        "/srv/kube/west.yaml",
        str(tmp_path / "shared" / "east.yaml"),
    ]


def test_clusters_lists_leader_then_members_with_default_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/k/first:/k/second")
    text = BASE.replace("      kubeconfig: ./east.yaml\n", "      context: east\n      labels: {env: prod}\n")
    fleet = load_fleet(_write(tmp_path, text), offline=True)
    refs = fleet.clusters()
    assert [(r.name, r.role) for r in refs] == [("north", "leader"), ("west", "member"), ("east", "member")]
    east = refs[2]
    assert (east.kubeconfig, east.context, east.labels) == (Path("/k/first"), "east", {"env": "prod"})
    assert refs[0].context is None


def test_pins_and_api_servers_are_normalised(tmp_path: Path) -> None:
    digest = "ab" * 32
    text = BASE.replace(
        "    kubeconfig: ./north.yaml", f"    apiServer: https://north:6443/\n    caSha256: sha256:{digest}"
    )
    fleet = load_fleet(_write(tmp_path, text), offline=True)
    assert (fleet.spec.leader.api_server, fleet.spec.leader.ca_sha256) == ("https://north:6443", digest)


def test_model_is_frozen(tmp_path: Path) -> None:
    fleet = load_fleet(_write(tmp_path, BASE), offline=True)
    with pytest.raises(ValidationError):
        fleet.spec.tokens.ttl = "1h"  # type: ignore[misc]


def test_anchors_and_merge_keys_work_and_locate(tmp_path: Path) -> None:
    text = BASE.replace(
        "    - name: west\n      kubeconfig: ./west.yaml\n",
        "    - &west\n      name: west\n      kubeconfig: ./west.yaml\n      labels: {env: 1}\n",
    ).replace("    - name: east\n      kubeconfig: ./east.yaml\n", "    - <<: *west\n      name: east\n")
    with pytest.raises(ConfigError) as caught:
        load_fleet(_write(tmp_path, text), offline=True)
    # the anchored member's bad label is reported at its own line, the merged copy at the merging item
    assert [(d.location.line, d.location.path) for d in caught.value.diagnostics if d.location] == [
        (17, "spec.members[0].labels.env"),
        (18, "spec.members[1].labels.env"),
    ]
    good = load_fleet(_write(tmp_path, text.replace("{env: 1}", "{env: prod}")), offline=True)
    assert [m.labels for m in good.spec.members] == [{"env": "prod"}, {"env": "prod"}]
    assert good.spec.members[1].kubeconfig == tmp_path / "west.yaml"


def test_member_only_fleet_takes_the_leader_name_from_the_join_file() -> None:
    fleet = load_fleet(ROOT / "examples/split/member-east/fleet.yaml")
    assert (fleet.leader_name, fleet.is_member_only) == ("north", True)
    assert [c.name for c in fleet.clusters()] == ["east"]


def test_checked_in_schema_is_fresh() -> None:
    checked_in = (ROOT / "schemas" / "fleet.schema.json").read_text()
    assert checked_in == render_schema(), (
        "schemas/fleet.schema.json is stale: run `python3 -m fleetplan.config.schema > "
        "schemas/fleet.schema.json`"
    )


def test_schema_describes_every_field_with_its_default() -> None:
    schema = json.loads(render_schema())
    tokens = schema["$defs"]["Tokens"]["properties"]
    assert tokens["ttl"]["default"] == "24h" and "Default 24h" in tokens["ttl"]["description"]
    missing = [
        (name, key)
        for name, definition in schema["$defs"].items()
        for key, prop in definition.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert missing == []
    assert schema["properties"]["apiVersion"]["const"] == "fleetplan.dev/v1alpha1"


def test_checked_in_reference_doc_is_fresh() -> None:
    assert (ROOT / "docs" / "fleet-yaml.md").read_text() == render_reference(), (
        "docs/fleet-yaml.md is stale: run "
        "`python3 -m fleetplan.config.schema --markdown > docs/fleet-yaml.md`"
    )


def test_both_join_file_formats_written_by_the_antrea_stack_validate(tmp_path: Path) -> None:
    from fleetplan.stacks.joinconfigs import JoinConfig, render_join_config

    join = JoinConfig(
        cluster_set_id="split-set",
        leader_cluster_id="north",
        leader_namespace="antrea-multicluster",
        leader_api_server="https://north.example:6443",
        cluster_id="east",
        token="t0k3n",
        ca_crt="-----BEGIN CERTIFICATE-----\n",
    )
    fleet_text = (ROOT / "examples/split/member-east/fleet.yaml").read_text().replace("../kubeconfigs/", "./")
    for fmt in ("antrea", "fleetplan"):
        (tmp_path / "east-join.yaml").write_text(render_join_config(join, fmt))
        fleet = load_fleet(_write(tmp_path, fleet_text), offline=True)
        assert (fleet.leader_name, fleet.is_member_only) == ("north", True), fmt
