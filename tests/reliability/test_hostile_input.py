"""Hostile input: fuzzed fleet.yaml files and hostile kubeconfigs.

fleet.yaml: hypothesis generates documents three ways (mutations of a valid fleet, YAML-shaped
text full of YAML's sharp edges, raw bytes) and each goes through the real CLI entry point
(`fleetplan validate`, in process). The outcome must be exit 0 or 1 with one-line diagnostics, never
a traceback or an internal error (exit 3), and each case must finish quickly. CI runs a few hundred
cases; FLEETPLAN_FULL=1 runs 10,000.

Kubeconfigs: `fleetplan plan` against a fleet whose leader kubeconfig is hostile (missing, garbage,
no user, bad certificates, a foreign CA, a closed port, exec plugins that fail, print garbage, hang
or do not exist) must exit 1 within the timeouts with a one-line error naming the cluster.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fleetkit import FULL, ResourcesFleet, record, run_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetplan.lab.pki import CertificateAuthority

FUZZ_CASES = 10_000 if FULL else int(os.environ.get("FLEETPLAN_FUZZ_CASES", "300"))
CASE_BUDGET = 5.0  # seconds one validation may take before it counts as a hang
VALID = {
    "apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "fuzz"},
    "spec": {"stack": "antrea", "version": "v2.2.0", "clusterSet": {"name": "fuzz-set"},
             "leader": {"name": "north", "kubeconfig": "./kc", "context": "north"},
             "members": [{"name": "west", "context": "west", "labels": {"env": "prod"}}],
             "tokens": {"strategy": "per-member", "kind": "bound", "ttl": "24h", "rotateBefore": "6h"},
             "wait": {"timeout": "5m"}, "lifecycle": {"preventDestroy": ["leader"]},
             "resources": [{"clusters": "all", "path": "./extras/"}]},
}
SHARP = ["!!python/object/apply:os.system ['true']", "&a [*a]", "*undefined", "? [a, b]\n: c", "<<: *x",
         "--- !!binary AAAA", "\t", "\ufeff", "\x00", "'unterminated", "{", "]", "0x1F", "1e309", "-.inf",
         "~", "yes", "no", "on", "2001-12-14t21:59:43.10-05:00", "!!set {a, b}", "%YAML 1.1\n---", "...",
         "&x a\nb: *x", "k: " + "[" * 200, "a" * 5000]

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                      st.text(max_size=40), st.sampled_from(SHARP))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=12)


@st.composite
def mutated_fleet(draw: st.DrawFn) -> str:
    """A valid fleet with a few fields replaced, removed or added, anywhere in the tree."""
    doc: Any = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 4))):
        node, path = doc, []
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            path.append(key)
            if not isinstance(node[key], dict | list):
                break
            node = node[key]
        parent, key = (doc, None) if not path else (_walk(doc, path[:-1]), path[-1])
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if key is None:
            doc = draw(json_value) if action == "replace" else doc
        elif action == "delete" and isinstance(parent, dict):
            parent.pop(key, None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(json_value)
        else:
            parent[key] = draw(json_value)
    if draw(st.booleans()):
        return json.dumps(doc)
    return _to_yaml(doc)


def _walk(doc: Any, path: list[Any]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _to_yaml(doc: Any) -> str:
    from io import StringIO

    from ruamel.yaml import YAML

    out = StringIO()
    yaml = YAML()
    yaml.dump(doc, out)
    return out.getvalue()


SKELETON = ["apiVersion: fleetplan.dev/v1alpha1", "kind: Fleet", "spec:", "  leader:", "  - name: x",
            "metadata: {name: a}", ": ", "- ", "#", "\n", "  "]
yamlish_text = st.lists(st.one_of(st.sampled_from([*SHARP, *SKELETON]), st.text(max_size=30)),
                        max_size=25).map("".join)
GENERATORS = {"mutations of a valid fleet": mutated_fleet(), "YAML-shaped text": yamlish_text,
              "raw bytes": st.binary(max_size=400)}
SHARE = {"mutations of a valid fleet": 0.6, "YAML-shaped text": 0.3, "raw bytes": 0.1}


@pytest.mark.parametrize("generator", list(GENERATORS))
def test_fuzzed_fleet_files_give_clear_errors(tmp_path: Path, generator: str) -> None:
    (tmp_path / "extras").mkdir()
    (tmp_path / "kc").write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "north",
                                             "clusters": [{"name": "n", "cluster": {"server": "https://127.0.0.1:1"}}],
                                             "users": [{"name": "u", "user": {}}],
                                             "contexts": [{"name": c, "context": {"cluster": "n", "user": "u"}}
                                                          for c in ("north", "west")]}))
    stats = {"cases": 0, "ok": 0, "errors": 0, "tracebacks": 0, "slowest": 0.0}
    bad: list[str] = []
    path = tmp_path / "fleet.yaml"

    @settings(max_examples=max(1, int(FUZZ_CASES * SHARE[generator])), deadline=None, database=None,
              suppress_health_check=list(HealthCheck), derandomize=not FULL)
    @given(GENERATORS[generator])
    def case(content: str | bytes) -> None:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, errors="surrogatepass")
        started = time.monotonic()
        code, _out, err = run_in_process(tmp_path, "validate", "-f", str(path))
        took = time.monotonic() - started
        stats["cases"] += 1
        stats["slowest"] = max(stats["slowest"], took)
        stats["ok" if code == 0 else "errors"] += 1
        if code not in (0, 1) or "Traceback" in err or "internal error" in err or took > CASE_BUDGET \
                or (code == 1 and not err.strip()):
            stats["tracebacks"] += 1
            if len(bad) < 5:
                bad.append(f"exit {code} in {took:.1f}s: {err.strip()[:300]!r} for {content[:200]!r}")

    case()
    ok = not bad
    record("fuzz", generator=generator, cases=stats["cases"], tracebacks=stats["tracebacks"],
           slowest=round(stats["slowest"], 3), ok=ok)
    assert ok, "\n".join(bad)


# -- hostile kubeconfigs ------------------------------------------------------------------------

def _admin(cluster: Any) -> dict[str, Any]:
    return json.loads(Path(cluster.kubeconfig).read_text())


def _script(root: Path, name: str, body: str) -> str:
    path = root / name
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(stat.S_IRWXU)
    return str(path)


def _with_user(cluster: Any, user: dict[str, Any]) -> dict[str, Any]:
    config = _admin(cluster)
    config["users"][0]["user"] = user
    return config


def _exec_user(command: str) -> dict[str, Any]:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": command,
                     "interactiveMode": "Never"}}


def _hostile_cases(root: Path, cluster: Any) -> dict[str, Any]:
    admin = _admin(cluster)
    foreign = CertificateAuthority.create("someone-else")
    no_user = dict(admin, users=[])
    wrong_ca = json.loads(json.dumps(admin))
    wrong_ca["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(foreign.cert_pem).decode()
    foreign_client = foreign.issue("mallory", groups=("system:masters",), client=True)
    closed = json.loads(json.dumps(admin))
    closed["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    garbage_cert = _with_user(cluster, {"client-certificate-data": base64.b64encode(b"not a cert").decode(),
                                        "client-key-data": base64.b64encode(b"not a key").decode()})
    return {
        "kubeconfig file missing": None,
        "kubeconfig is binary garbage": b"\x00\xff\xfe garbage \x01" * 50,
        "kubeconfig is empty": b"",
        "context's user missing": no_user,
        "context missing": dict(admin, contexts=[]),
        "client certificate is garbage": garbage_cert,
        "server certificate from a foreign CA": wrong_ca,
        "client certificate from a foreign CA": _with_user(cluster, {
            "client-certificate-data": base64.b64encode(foreign_client.cert_pem).decode(),
            "client-key-data": base64.b64encode(foreign_client.key_pem).decode()}),
        "API server port closed": closed,
        "token file missing": _with_user(cluster, {"tokenFile": str(root / "no-such-token")}),
        "exec plugin fails": _with_user(cluster, _exec_user(_script(
            root, "fails", "import sys\nsys.stderr.write('login expired\\n')\nsys.exit(1)"))),
        "exec plugin prints garbage": _with_user(cluster, _exec_user(_script(
            root, "garbage", "print('<html>definitely not an ExecCredential</html>')"))),
        "exec plugin prints the wrong JSON": _with_user(cluster, _exec_user(_script(
            root, "wrongjson", "print('{\"kind\": \"ExecCredential\", \"status\": 7}')"))),
        "exec plugin hangs": _with_user(cluster, _exec_user(_script(root, "hangs", "import time\ntime.sleep(600)"))),
        "exec plugin does not exist": _with_user(cluster, _exec_user(str(root / "no-such-plugin"))),
    }


HANG_LIMIT = 60.0  # seconds: the run must end by itself (exec plugins get 30 s) before the test's timeout


def test_hostile_kubeconfigs_give_one_line_errors(tmp_path: Path, lab: Any) -> None:
    leader = lab.clusters[0]
    cases = _hostile_cases(tmp_path, leader)
    problems = []
    for case, content in cases.items():
        path = tmp_path / f"{abs(hash(case))}.kubeconfig"
        if content is not None:
            path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
        fleet = ResourcesFleet(tmp_path / f"fleet-{abs(hash(case))}", lab, kubeconfigs={leader.name: str(path)},
                               prefix="h")
        started = time.monotonic()
        try:
            done = fleet.run("plan", check=None, timeout=HANG_LIMIT + 30)
            code, err = done.returncode, done.stderr
        except Exception as exc:  # subprocess.TimeoutExpired: a hang
            code, err = -1, f"HUNG: {exc}"
        took = time.monotonic() - started
        lines = [line for line in err.strip().splitlines() if line.strip()]
        first = lines[0] if lines else ""
        ok = (code == 1 and "Traceback" not in err and "internal error" not in err and took < HANG_LIMIT
              and (leader.name in first or str(path) in first) and len(lines) <= 3)
        if not ok:
            problems.append(f"{case}: exit {code} after {took:.1f}s: {err.strip()[:400]}")
        record("kubeconfig", case=case, exit=code, seconds=round(took, 1), error=first[:200], ok=ok)
    assert not problems, "\n".join(problems)
