"""Join bundles: both formats round-trip, files are 0600, and a member-only fleet renders from one."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from fleetplan.addrs import Address
from fleetplan.config import Fleet
from fleetplan.errors import ConfigError
from fleetplan.stacks.antrea import desired_fleet
from fleetplan.stacks.antrea_preflight import multicluster_gate_warning
from fleetplan.stacks.bundles import ENV_MIRROR, BundleSource
from fleetplan.stacks.desired import Ref
from fleetplan.stacks.joinconfigs import JoinConfig, read_join_config, render_join_config, write_private_file

MIRROR = Path(os.environ.get(ENV_MIRROR) or Path(__file__).resolve().parents[4] / "shared" / "upstream")
TOKEN = "eyJ-test-token-value"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
JOIN = JoinConfig(cluster_set_id="demo-set", leader_cluster_id="north", leader_namespace="mc-north",
                  leader_api_server="https://north.example:6443", cluster_id="east",
                  namespace="kube-system", token_secret_name="member-east-token", token=TOKEN, ca_crt=CA)


@pytest.mark.parametrize("fmt", ["antrea", "fleetplan"])
def test_round_trip(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "east-join.yaml"
    write_private_file(path, render_join_config(JOIN, fmt))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = read_join_config(path)
    assert (back.cluster_set_id, back.leader_cluster_id, back.leader_namespace, back.leader_api_server,
            back.cluster_id, back.token, back.ca_crt) == (
        "demo-set", "north", "mc-north", "https://north.example:6443", "east", TOKEN, CA)
    assert TOKEN not in repr(back)


def test_antrea_format_is_what_antctl_reads(tmp_path: Path) -> None:
    text = render_join_config(JOIN, "antrea")
    head, secret = text.split("\n---\n")
    assert "apiVersion: multicluster.antrea.io/v1alpha1\n" in head and "kind: ClusterSetJoinConfig" in head
    for line in ("clusterSetID: demo-set", "leaderClusterID: north", "leaderNamespace: mc-north",
                 "leaderAPIServer: https://north.example:6443", "clusterID: east"):
        assert line in head
    assert "kind: Secret" in secret and "type: Opaque" in secret and "name: member-east-token" in secret
    assert base64.b64encode(TOKEN.encode()).decode() in secret and TOKEN not in text


def test_antctl_file_with_token_secret_file(tmp_path: Path) -> None:
    (tmp_path / "token.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: tok}\ntype: Opaque\ndata:\n"
        f"  token: {base64.b64encode(b'abc').decode()}\n  ca.crt: {base64.b64encode(b'CA').decode()}\n")
    (tmp_path / "join.yml").write_text(
        "apiVersion: multicluster.antrea.io/v1alpha1\nkind: ClusterSetJoinConfig\nclusterSetID: s\n"
        "leaderClusterID: north\nleaderNamespace: antrea-multicluster\nleaderAPIServer: https://n:6443/\n"
        "tokenSecretFile: token.yaml\n")
    join = read_join_config(tmp_path / "join.yml")
    assert (join.token, join.ca_crt, join.token_secret_name, join.leader_api_server) == (
        "abc", "CA", "tok", "https://n:6443")


@pytest.mark.parametrize(("text", "problem"), [
    ("apiVersion: v1\nkind: ConfigMap\n", "no ClusterSetJoinConfig"),
    ("apiVersion: multicluster.antrea.io/v1alpha1\nkind: ClusterSetJoinConfig\nclusterSetID: s\n",
     "lacks leaderClusterID, leaderNamespace, leaderAPIServer"),
])
def test_bad_join_files(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "j.yaml").write_text(text)
    with pytest.raises(ConfigError, match=problem):
        read_join_config(tmp_path / "j.yaml")


def member_only_fleet(tmp_path: Path, fmt: str, members: tuple[str, ...] = ("east",)) -> Fleet:
    write_private_file(tmp_path / "east-join.yaml", render_join_config(JOIN, fmt))
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "east-side"},
           "spec": {"stack": "antrea", "version": "v2.7.0", "clusterSet": {"name": "demo-set"},
                    "leader": {"joinConfig": "east-join.yaml"},
                    "members": [{"name": m} for m in members]}}
    return Fleet.model_validate(doc, context={"base_dir": str(tmp_path)})


@pytest.mark.parametrize("fmt", ["antrea", "fleetplan"])
def test_member_only_fleet_touches_only_the_member(tmp_path: Path, fmt: str) -> None:
    source = BundleSource(mirror=MIRROR, cache_dir=tmp_path / "cache")
    desired = desired_fleet(member_only_fleet(tmp_path, fmt), bundles=source)
    assert {r.address.cluster for r in desired.resources} == {"east"}
    by = desired.by_address()
    secret = by[Address.parse("east/core/Secret/kube-system/member-east-token")]
    assert secret.body["data"]["token"] == base64.b64encode(TOKEN.encode()).decode()
    assert secret.body["data"]["namespace"] == base64.b64encode(b"mc-north").decode()
    assert secret.sensitive_paths == frozenset({"data.token"})
    cs = by[Address.parse("east/multicluster.crd.antrea.io/ClusterSet/kube-system/demo-set")]
    assert cs.body["spec"] == {"clusterID": "east", "namespace": "mc-north", "leaders": [
        {"clusterID": "north", "server": "https://north.example:6443", "secret": "member-east-token"}]}
    assert not any(isinstance(v, Ref) for r in desired.resources for v in (r.body.get("data") or {}).values())


def test_member_only_fleet_must_name_the_bundles_member(tmp_path: Path) -> None:
    source = BundleSource(mirror=MIRROR, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match="the join bundle was made for cluster 'east'"):
        desired_fleet(member_only_fleet(tmp_path, "antrea", ("west",)), bundles=source)


class TestMulticlusterGate:
    def conf(self, text: str) -> dict[str, object]:
        return {"data": {"antrea-agent.conf": text}}

    def test_gate_off_warns(self) -> None:
        diag = multicluster_gate_warning("east", self.conf("featureGates:\n  Multicluster: false\n"))
        assert diag is not None and diag.severity == "warning" and "Multicluster" in diag.summary

    def test_gate_absent_warns(self) -> None:
        assert multicluster_gate_warning("east", self.conf("featureGates: {}\n")) is not None

    def test_gate_on_or_no_configmap_is_quiet(self) -> None:
        assert multicluster_gate_warning("east", self.conf("featureGates:\n  Multicluster: true\n")) is None
        assert multicluster_gate_warning("east", None) is None
