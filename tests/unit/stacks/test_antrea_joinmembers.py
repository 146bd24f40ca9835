"""Join members (spec.antrea.joinMembers), the strict two-document join file, and the export command's
refusals that need no cluster."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fleetplan.config import check_fleet_file
from fleetplan.config.joining import load_join_config
from fleetplan.errors import ConfigError
from fleetplan.stacks.antrea import desired_fleet
from fleetplan.stacks.bundles import ENV_MIRROR, BundleSource
from fleetplan.stacks.joinconfigs import write_private_file

MIRROR = Path(os.environ.get(ENV_MIRROR) or Path(__file__).resolve().parents[4] / "shared" / "upstream")
HEAD = ("apiVersion: multicluster.antrea.io/v1alpha1\nkind: ClusterSetJoinConfig\nclusterSetID: demo-set\n"
        "clusterID: east\nleaderClusterID: north\nleaderNamespace: antrea-multicluster\n"
        "leaderAPIServer: https://north.example:6443\n")
SECRET = ("apiVersion: v1\nkind: Secret\nmetadata: {name: member-east-token}\ntype: Opaque\n"
          f"data: {{token: {base64.b64encode(b't0k').decode()}, ca.crt: {base64.b64encode(b'CA').decode()}}}\n")


def leader_fleet(tmp_path: Path, kind: str = "bound", **antrea: Any) -> Path:
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "lead"},
           "spec": {"stack": "antrea", "version": "v2.7.0", "clusterSet": {"name": "demo-set"},
                    "leader": {"name": "north", "apiServer": "https://north.example:6443",
                               "kubeconfig": str(tmp_path / "kc")},
                    "tokens": {"kind": kind}, "antrea": antrea}}
    (tmp_path / "kc").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "north",
        "clusters": [{"name": "north", "cluster": {"server": "https://north.example:6443"}}],
        "users": [{"name": "u", "user": {"token": "unused"}}],
        "contexts": [{"name": "north", "context": {"cluster": "north", "user": "u"}}]}))
    path = tmp_path / "fleet.yaml"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("kind", "token_kind"), [("bound", None), ("secret", "Secret")])
def test_join_members_get_an_identity_on_the_leader(tmp_path: Path, kind: str, token_kind: str | None) -> None:
    checked = check_fleet_file(leader_fleet(tmp_path, kind, joinMembers=["east"]), offline=True)
    assert checked.fleet is not None, checked.diagnostics
    desired = desired_fleet(checked.fleet, bundles=BundleSource(mirror=MIRROR, cache_dir=tmp_path / "c"))
    east = {r.address.kind: r for r in desired.resources if r.address.name == "member-east-token"}
    assert {r.address.cluster for r in desired.resources} == {"north"}  # nothing on the member
    assert east["ServiceAccount"].body["metadata"]["annotations"] == {"multicluster.antrea.io/cluster-id": "east"}
    assert east["RoleBinding"].body["roleRef"]["name"] == "antrea-mc-member-cluster-role"
    # A bound token would be minted and thrown away: the export mints it instead.
    assert set(east) == {"ServiceAccount", "RoleBinding"} | ({token_kind} if token_kind else set())


def test_join_members_take_part_in_the_id_checks(tmp_path: Path) -> None:
    checked = check_fleet_file(leader_fleet(tmp_path, joinMembers=["north-1"]), offline=True)
    assert checked.fleet is not None
    with pytest.raises(ConfigError, match="dash-prefix"):
        desired_fleet(checked.fleet, bundles=BundleSource(mirror=MIRROR, cache_dir=tmp_path / "c"))


def test_antctl_two_document_file_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "j.yaml").write_text("---\n" + HEAD + "---\n" + SECRET)
    bundle = load_join_config(tmp_path / "j.yaml")
    assert (bundle.member, bundle.leader_name, bundle.has_token) == ("east", "north", True)


@pytest.mark.parametrize(("text", "message", "line"), [
    (HEAD + "---\n" + SECRET + "---\n" + SECRET, "at most one token Secret; found 3 documents", 15),
    (HEAD + "---\napiVersion: v1\nkind: ConfigMap\n", "second document must be the member's token Secret", 10),
    (HEAD + "---\n" + SECRET.replace("type: Opaque", "type: kubernetes.io/service-account-token"),
     "must be of type Opaque", 12),
    (SECRET + "---\n" + HEAD, "first document must be the ClusterSetJoinConfig", 1),
])
def test_anything_but_the_secret_document_is_refused(tmp_path: Path, text: str, message: str, line: int) -> None:
    (tmp_path / "j.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_join_config(tmp_path / "j.yaml")
    where = caught.value.diagnostics[0].location
    assert where is not None and where.line == line


def test_private_file_is_created_0600_even_with_an_open_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_private_file(tmp_path / "out.yaml", "x: 1\n")
        write_private_file(tmp_path / "out.yaml", "x: 2\n")  # replacing keeps it private too
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.yaml").stat().st_mode) == 0o600
    assert (tmp_path / "out.yaml").read_text() == "x: 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def run_cli(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from fleetplan.cli import cli

    result = CliRunner().invoke(cli, list(args), standalone_mode=True)
    return result.exit_code, result.output + str(result.exception or "")


def test_export_refuses_an_undeclared_member(tmp_path: Path) -> None:
    path = leader_fleet(tmp_path, joinMembers=["east"])
    code, out = run_cli("join-config", "export", "--member", "eats", "-o", str(tmp_path / "x"), "-f", str(path))
    assert code != 0 and "not declared" in out and "did you mean 'east'" in out
    assert not (tmp_path / "x").exists()
