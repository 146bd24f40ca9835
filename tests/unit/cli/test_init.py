"""`fleetplan init`: scaffolds that validate, names from files or contexts, no silent overwrite."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetplan.cli import main
from fleetplan.config import load_fleet


def _kubeconfig(path: Path, contexts: list[str]) -> Path:
    entries = "\n".join(
        f"- {{name: {c}, context: {{cluster: {c}, user: {c}}}}}" for c in contexts)
    clusters = "\n".join(f"- {{name: {c}, cluster: {{server: 'https://127.0.0.1:6443'}}}}" for c in contexts)
    users = "\n".join(f"- {{name: {c}, user: {{token: not-a-real-token}}}}" for c in contexts)
    path.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n{clusters}\nusers:\n{users}\n"
                    f"contexts:\n{entries}\ncurrent-context: {contexts[0]}\n")
    return path


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_kubeconfig_dir_names_clusters_after_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kc = tmp_path / "kc"
    kc.mkdir()
    for name in ("north", "West_2", "east"):
        _kubeconfig(kc / f"{name}.yaml", [name])
    target = tmp_path / "fleet.yaml"
    code, out, err = _run(["init", "--kubeconfig-dir", str(kc), "--leader", "north", "-o", str(target)], capsys)
    assert code == 0, err
    fleet = load_fleet(target)
    assert fleet.leader_name == "north"
    assert sorted(c.name for c in fleet.clusters()) == ["east", "north", "west-2"]
    assert "leader north and 2 member(s)" in out
    assert "# " in target.read_text()  # commented for people


def test_contexts_of_one_kubeconfig_for_ocm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _kubeconfig(tmp_path / "config", ["hub", "spoke-a", "spoke-b"])
    target = tmp_path / "ocm.yaml"
    code, _, err = _run(["init", "--stack", "ocm", "--contexts", "hub,spoke-a,spoke-b",
                         "--kubeconfig", str(source), "-o", str(target)], capsys)
    assert code == 0, err
    fleet = load_fleet(target)
    assert fleet.spec.stack == "ocm"
    assert [(c.name, c.context) for c in fleet.clusters()] == [
        ("hub", "hub"), ("spoke-a", "spoke-a"), ("spoke-b", "spoke-b")]


def test_never_overwrites_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _kubeconfig(tmp_path / "config", ["a", "b"])
    target = tmp_path / "fleet.yaml"
    target.write_text("keep me\n")
    argv = ["init", "--contexts", "a,b", "--kubeconfig", str(source), "-o", str(target)]
    code, _, err = _run(argv, capsys)
    assert code == 1
    assert "already exists" in err and "--force" in err
    assert target.read_text() == "keep me\n"
    code, _, err = _run([*argv, "--force"], capsys)
    assert code == 0, err
    assert load_fleet(target).leader_name == "a"


@pytest.mark.parametrize(("argv", "message"), [
    (["--contexts", "a,zz"], "no context named zz"),
    (["--contexts", "a"], "at least one member"),
    (["--contexts", "a,b", "--leader", "c"], "--leader c: no such cluster"),
    ([], "--kubeconfig-dir DIR or --contexts"),
])
def test_refusals_are_one_line_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], message: str) -> None:
    source = _kubeconfig(tmp_path / "config", ["a", "b"])
    target = tmp_path / "fleet.yaml"
    code, _, err = _run(["init", *argv, "--kubeconfig", str(source), "-o", str(target)], capsys)
    assert code == 1
    assert message in err
    assert "hint:" in err and "Traceback" not in err
    assert not target.exists()
