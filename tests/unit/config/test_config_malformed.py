"""A table of malformed fleet files: each must exit 1 with exactly these lines on stderr.

The fleet file is written to a temporary directory and validated through the CLI in-process
(`fleetplan.cli.main`); in the expected lines `F` stands for the file's path and `D` for its
directory. Every line names file:line:column (or the file alone when there is no line), the field
path, what was expected and found, and a hint.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from config_cases import BASE

from fleetplan.cli import main


def _swap(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def run_validate(path: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(["validate", "-f", str(path), *extra])
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int)
    return code, out.getvalue(), err.getvalue()


OCM = _swap("stack: antrea", "stack: ocm")
HINT_SPACES = "(hint: replace tabs with spaces)"
NOT_FOUND_HINT = "(hint: write it with `fleetplan join-config export --member NAME` on the leader side)"
LAUGHS = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n"
          + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcd", "bcde", strict=True))
          + "f: [*e, *e, *e]\n")

CASES: list[tuple[str, str | bytes, list[str]]] = [
    ("empty file", "", ["F:1:1: error: the fleet file is empty (hint: start from an example in examples/ "
                        "(apiVersion, kind, metadata, spec))"]),
    ("comments only", "# nothing here\n", ["F:1:1: error: the fleet file is empty (hint: start from an "
                                           "example in examples/ (apiVersion, kind, metadata, spec))"]),
    ("binary junk", b"apiVersion: x\n\x00\x01\x02\x89PNG",
     ["F:2:1: error: this is a binary file, not YAML text (found a NUL byte) (hint: pass the fleet.yaml "
      "file with -f)"]),
    ("latin-1 text", b"apiVersion: fleetplan.dev/v1alpha1\nkind: Fleet\nmetadata: {name: d\xe9mo}\n",
     ["F:3:19: error: this file is not UTF-8 text (byte 0xe9) (hint: save it as UTF-8)"]),
    ("tab indentation", _swap("    name: demo-set", "\tname: demo-set"),
     [f"F:9:1: error: a tab character; YAML indentation must use spaces {HINT_SPACES}"]),
    ("unclosed flow list", _swap("    name: demo-set", "    name: [demo-set"),
     ["F:10:9: error: YAML syntax error: while parsing a flow sequence: expected ',' or ']', but got ':' "
      "(hint: check the indentation and quoting on this line and the one before)"]),
    ("duplicate key", _swap("  version: v2.7.0\n", "  version: v2.7.0\n  version: v2.8.0\n"),
     ["F:8:3: error: duplicate key 'version' (hint: each key may appear once in a mapping; merge the two "
      "entries)"]),
    ("two documents", BASE + "---\nkind: Fleet\n",
     ["F:18:1: error: 2 YAML documents; a fleet file holds exactly one (hint: remove the '---' separator "
      "and keep one document per file)"]),
    ("top-level list", "- a\n- b\n",
     ["F:1:1: error: expected a mapping at the top level, found a list (hint: a YAML file here holds "
      "'key: value' pairs, starting with apiVersion)"]),
    ("wrong apiVersion", _swap("fleetplan.dev/v1alpha1", "v1"),
     ["F:1:13: error: apiVersion: expected 'fleetplan.dev/v1alpha1', found 'v1' (hint: the first line "
      "should be 'apiVersion: fleetplan.dev/v1alpha1')"]),
    ("missing apiVersion", BASE.split("\n", 1)[1],
     ["F:1:1: error: missing required field 'apiVersion'; expected 'fleetplan.dev/v1alpha1' (hint: the "
      "first line should be 'apiVersion: fleetplan.dev/v1alpha1')"]),
    ("wrong kind", _swap("kind: Fleet", "kind: Cluster"),
     ["F:2:7: error: kind: expected 'Fleet', found 'Cluster' (hint: write 'kind: Fleet')"]),
    ("misspelt spec", _swap("spec:", "specs:"),
     ["F:1:1: error: spec: missing required field 'spec' (hint: add 'spec:' here: The fleet's shape. "
      "Required.)",
      "F:5:1: error: specs: unknown field 'specs' (hint: did you mean 'spec'?)"]),
    ("spec is a string", BASE.split("spec:")[0] + "spec: antrea\n",
     ["F:5:7: error: spec: expected a mapping, found the string 'antrea' (hint: write 'key: value' pairs "
      "indented under this key)"]),
    ("fleet name not DNS-1123", _swap("name: demo\n", "name: Demo_Fleet\n"),
     ["F:4:9: error: metadata.name: 'Demo_Fleet' is not a DNS-1123 label (lower-case letters, digits and "
      "'-', starting and ending with a letter or digit) (hint: for example 'demo-fleet')"]),
    ("stack typo", _swap("stack: antrea", "stack: antreaa"),
     ["F:6:10: error: spec.stack: expected antrea, ocm or none, found the string 'antreaa' (hint: did you mean "
      "'antrea'?)"]),
    ("version without v", _swap("v2.7.0", "2.7.0"),
     ["F:7:12: error: spec.version: '2.7.0' is not a release version like v2.7.0 (hint: did you mean "
      "'v2.7.0'?)"]),
    ("version is a number", _swap("v2.7.0", "2.7"),
     ["F:7:12: error: spec.version: expected a string, found the number 2.7 (hint: quote the value to make "
      "it text)"]),
    ("unknown key, wrong case", _swap("    kubeconfig: ./north.yaml", "    kubeConfig: ./north.yaml"),
     ["F:12:5: error: spec.leader.kubeConfig: unknown field 'kubeConfig' (hint: did you mean "
      "'kubeconfig'?)"]),
    ("snake_case key", _swap("    kubeconfig: ./north.yaml", "    api_server: https://north:6443"),
     ["F:12:5: error: spec.leader.api_server: unknown field 'api_server' (hint: did you mean 'apiServer'?)"]),
    ("members is a mapping", BASE.split("  members:")[0] + "  members:\n    west: {}\n",
     ["F:14:5: error: spec.members: expected a list, found a mapping (hint: write items as '- item' lines "
      "or [a, b])"]),
    ("member without name", _swap("    - name: east\n", "    - nmae: east\n"),
     ["F:16:7: error: spec.members[1].name: missing required field 'name' (hint: add 'name:' here: Cluster "
      "ID of the member (the OCM managed cluster name). Required.)",
      "F:16:7: error: spec.members[1].nmae: unknown field 'nmae' (hint: did you mean 'name'?)"]),
    ("empty member item", _swap("    - name: east\n      kubeconfig: ./east.yaml\n", "    -\n"),
     ["F:16:6: error: spec.members[1]: expected a mapping, found null (an empty value) (hint: write "
      "'key: value' pairs indented under this key)"]),
    ("duplicate member names", _swap("- name: east", "- name: west"),
     ["F:16:13: error: spec.members[1].name: cluster name 'west' is already used by another member "
      "(line 14) (hint: every cluster needs its own name)"]),
    ("leader is also a member", _swap("- name: east", "- name: north"),
     ["F:16:13: error: spec.members[1].name: cluster name 'north' is already used by the leader (line 11) "
      "(hint: every cluster needs its own name)"]),
    ("antrea dash-prefix pair", _swap("- name: east", "- name: west-1"),
     ["F:14:13: error: spec.members[0].name: cluster IDs 'west' and 'west-1' form a dash-prefix pair, "
      "which Antrea refuses (hint: rename one, e.g. 'west1')"]),
    ("ocm reserved cluster name", _swap("- name: east", "- name: default", OCM),
     ["F:16:13: error: spec.members[1].name: 'default' cannot be an OCM cluster name: the hub makes a "
      "namespace per cluster and uses this one itself (hint: for example 'default-cluster')"]),
    ("bad duration", BASE + "  tokens: {ttl: 1d12x}\n",
     ["F:18:17: error: spec.tokens.ttl: '1d12x' is not a duration; write it like 24h, 90m, 1h30m or 45s "
      "(hint: units are d, h, m and s, largest first, e.g. 1h30m)"]),
    ("rotateBefore not below ttl", BASE + "  tokens: {ttl: 6h, rotateBefore: 6h}\n",
     ["F:18:35: error: spec.tokens.rotateBefore: rotateBefore (6h) must be shorter than ttl (6h), or every "
      "plan rotates every token (hint: for example ttl: 24h with rotateBefore: 6h)"]),
    ("malformed sha256 pin", BASE + "  manifests:\n    sha256: {leader: abc}\n",
     ["F:19:22: error: spec.manifests.sha256.leader: 'abc' is not a sha256 digest (64 lower-case hex "
      "digits, optional 'sha256:' prefix) (hint: compute it with `sha256sum FILE`)"]),
    ("pin for another stack's bundle", BASE + "  manifests:\n    sha256: {hub: " + "a" * 64 + "}\n",
     ["F:19:14: error: spec.manifests.sha256.hub: no antrea bundle named 'hub' (hint: pins are allowed for: "
      "leader, member)"]),
    ("plain http api server", _swap("    kubeconfig: ./north.yaml", "    apiServer: http://north:6443"),
     ["F:12:16: error: spec.leader.apiServer: 'http://north:6443' is not an https:// URL of an API server "
      "(hint: API servers are reached over TLS)"]),
    ("loopback leader, remote member",
     _swap("      kubeconfig: ./west.yaml", "      apiServer: https://west.example:6443",
           _swap("    kubeconfig: ./north.yaml", "    apiServer: https://127.0.0.1:6443")),
     ["F:12:16: error: spec.leader.apiServer: the leader's API server https://127.0.0.1:6443 is a loopback "
      "address, but member 'west' is at https://west.example:6443, on another host (hint: set "
      "spec.leader.apiServer to an address the members can reach)"]),
    ("resources name an unknown cluster",
     BASE + "  resources:\n    - clusters: [west, south]\n      path: .\n",
     ["F:19:24: error: spec.resources[0].clusters[1]: no cluster named 'south'"]),
    ("preventDestroy names an unknown cluster", BASE + "  lifecycle: {preventDestroy: [nroth]}\n",
     ["F:18:32: error: spec.lifecycle.preventDestroy[0]: no cluster named 'nroth' (hint: name a cluster, "
      "or leader / members)"]),
    ("unset environment variable", _swap("./north.yaml", "${FLEETPLAN_TEST_UNSET}/north.yaml"),
     ["F:12:17: error: spec.leader.kubeconfig: environment variable FLEETPLAN_TEST_UNSET in "
      "'${FLEETPLAN_TEST_UNSET}/north.yaml' is not set (hint: export FLEETPLAN_TEST_UNSET or write the "
      "path out)"]),
    ("ocm options in an antrea fleet", BASE + "  ocm: {klusterlet: {mode: Singleton}}\n",
     ["F:18:3: error: spec.ocm: ocm options in an antrea fleet (hint: remove spec.ocm or set "
      "spec.stack: ocm)"]),
    ("klusterlet mode", OCM + "  ocm: {klusterlet: {mode: hosted}}\n",
     ["F:18:28: error: spec.ocm.klusterlet.mode: expected Default or Singleton, found the string 'hosted'"]),
    ("feature gate not a boolean", OCM + "  ocm: {clusterManager: {featureGates: {X: maybe}}}\n",
     ["F:18:44: error: spec.ocm.clusterManager.featureGates.X: expected true or false, found the string "
      "'maybe' (hint: write true or false without quotes)"]),
    ("kubernetes-only state field", BASE + "  state: {backend: local, namespace: fp}\n",
     ["F:18:27: error: spec.state.namespace: namespace applies to backend: kubernetes only"]),
    ("label value a number", _swap("      kubeconfig: ./west.yaml", "      labels: {tier: 1}"),
     ["F:15:22: error: spec.members[0].labels.tier: expected a string, found the number 1 (hint: quote "
      "the value to make it text)"]),
    ("custom YAML tag", _swap("name: demo\n", "name: !custom demo\n"),
     ["F:4:9: error: YAML tag '!custom' is not supported (hint: remove the tag; fleet.yaml uses plain "
      "YAML values)"]),
    ("alias expansion bomb", LAUGHS,
     ["F:1:32: error: the document expands to more than 200000 nodes (hint: anchors and aliases are "
      "expanded; use fewer of them)"]),
    ("joinConfig file missing", _swap("    name: north\n    kubeconfig: ./north.yaml\n",
                                      "    joinConfig: ./missing-join.yaml\n"),
     [f"F:11:17: error: spec.leader.joinConfig: join file 'D/missing-join.yaml' not found {NOT_FOUND_HINT}"]),
    ("joinConfig leader with a kubeconfig", _swap("    name: north\n", "    joinConfig: ./j.yaml\n"),
     [f"F:11:17: error: spec.leader.joinConfig: join file 'D/j.yaml' not found {NOT_FOUND_HINT}",
      "F:12:5: error: spec.leader.kubeconfig: a leader given by joinConfig takes no kubeconfig (hint: "
      "remove it: a member-only fleet holds no credentials for the leader)"]),
]


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_file_is_refused_with_exact_lines(tmp_path: Path, content: str | bytes,
                                                    expected: list[str]) -> None:
    path = tmp_path / "fleet.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code, out, err = run_validate(path, "--offline")
    lines = err.replace(str(path), "F").replace(str(tmp_path), "D").splitlines()
    assert (code, out, lines) == (1, "", expected)


def test_table_has_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


def test_oversized_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    with path.open("wb") as handle:  # sparse: 50 MB by size, nothing written
        handle.truncate(50 * 1024 * 1024)
    code, _, err = run_validate(path)
    assert code == 1
    assert err == (f"{path}: error: the fleet file is 52428800 bytes; the limit is 10485760 bytes "
                   "(hint: is this the right file?)\n")


def test_missing_file_names_the_flag(tmp_path: Path) -> None:
    code, _, err = run_validate(tmp_path / "nope.yaml")
    assert (code, err) == (1, f"{tmp_path / 'nope.yaml'}: error: fleet file not found (hint: pass the "
                              "path with -f FILE)\n")


def test_missing_kubeconfig_and_context_are_found_online(tmp_path: Path) -> None:
    (tmp_path / "north.yaml").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: n, cluster: {server: https://n:6443}}]\n"
        "contexts: [{name: north, context: {cluster: n, user: u}}]\ncurrent-context: north\n")
    (tmp_path / "west.yaml").write_text((tmp_path / "north.yaml").read_text())
    path = tmp_path / "fleet.yaml"
    path.write_text(_swap("      kubeconfig: ./west.yaml",
                          "      kubeconfig: ./west.yaml\n      context: west"))
    code, _, err = run_validate(path)
    lines = err.replace(str(path), "F").replace(str(tmp_path), "D").splitlines()
    assert code == 1
    assert lines == [
        "F:16:16: error: spec.members[0].context: context 'west' not found in 'D/west.yaml' (hint: "
        "contexts there: north)",
        "F:18:19: error: spec.members[1].kubeconfig: kubeconfig 'D/east.yaml' not found (hint: set "
        "kubeconfig: (relative to the fleet file) or KUBECONFIG)",
    ]
    assert run_validate(path, "--offline")[0] == 0
