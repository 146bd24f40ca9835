"""Secret hygiene on an Antrea fleet with per-member tokens (leader c1, members c2 and c3).

Every command a user runs (plan, plan --json, plan -out, show PLAN, show PLAN --json, apply PLAN
--json, --debug plan, show, show --json, state list, state show, join-config export, a failing
apply under --debug that also rotates tokens, and the apply that repairs it) is run through the
real CLI. Then the real secret values are collected from the clusters (every token fleetplan
minted or delivered, before and after rotation, and the clusters' admin client keys) and searched
for in every output, the plan file, the state file and its backup, and every annotation and label
on every object fleetplan owns: zero hits allowed. The join files are the one place a token must
be; they are the scanner's positive control and must be mode 0600.
"""

from __future__ import annotations

import base64
import json
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fleetkit import record
from ruamel.yaml import YAML
from secretscan import SecretSet, annotations_and_labels

from fleetplan.lab.clusters import admin_rest

pytestmark = pytest.mark.integration
OWNED_KINDS = [("v1", "Namespace"), ("v1", "Secret"), ("v1", "ServiceAccount"), ("v1", "ConfigMap"),
               ("v1", "Service"), ("apps/v1", "Deployment"), ("rbac.authorization.k8s.io/v1", "Role"),
               ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
               ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
               ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
               ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
               ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
               ("multicluster.crd.antrea.io/v1alpha2", "ClusterSet")]


def _collect(env: Any, secrets: SecretSet, tag: str) -> None:
    for member in env.members:
        status, raw = admin_rest(member).request("GET", f"/api/v1/namespaces/kube-system/secrets/member-{member.name}"
                                                          "-token")
        if status == 200:
            token = json.loads(raw)["data"].get("token")
            secrets.add(f"{tag} token delivered to {member.name}", base64.b64decode(token).decode() if token else None)
    listed = admin_rest(env.leader).get(f"/api/v1/namespaces/{env.ns}/secrets")
    for item in listed.get("items", []):
        token = (item.get("data") or {}).get("token")
        if token:
            secrets.add(f"{tag} leader Secret {item['metadata']['name']} token", base64.b64decode(token).decode())
    for cluster in (env.leader, *env.members):
        user = json.loads(Path(cluster.kubeconfig).read_text())["users"][0]["user"]
        secrets.add(f"{cluster.name} admin client key", base64.b64decode(user["client-key-data"]).decode())


def _owned_objects(env: Any, fleet_name: str) -> dict[str, str]:
    from fleetplan.live.clusters import KubeCluster
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.reading import selector

    found: dict[str, str] = {}
    for cluster in (env.leader, *env.members):
        api = KubeCluster(ClusterAccess(cluster.name, cluster.kubeconfig, cluster.context))
        for api_version, kind in OWNED_KINDS:
            objects = api.list(api_version, kind, "", selector(fleet_name))
            found |= {f"{cluster.name}: {k}": v for k, v in annotations_and_labels(objects).items()}
    return found


def _broken_member_kubeconfig(env: Any) -> str:
    member = env.members[1]
    config = json.loads(Path(member.kubeconfig).read_text())
    script = env.tmp / "expired-login"
    script.write_text("#!/bin/sh\necho 'token expired; run the login again' >&2\nexit 1\n")
    script.chmod(stat.S_IRWXU)
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                           "command": str(script), "interactiveMode": "Never"}}
    path = env.tmp / "broken-member.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return str(path)


def test_no_secret_value_leaves_the_clusters(antrea_fleet: Any) -> None:
    env, fleet = antrea_fleet, str(antrea_fleet.fleet_file)
    fleet_name = json.loads(Path(fleet).read_text())["metadata"]["name"]
    cli = env.cli
    secrets = SecretSet()
    cli("plan", "-f", fleet)
    cli("plan", "--json", "-f", fleet)
    cli("plan", "-out", "fleet.plan", "-f", fleet)
    cli("show", "fleet.plan", "-f", fleet)
    cli("show", "fleet.plan", "--json", "-f", fleet)
    cli("apply", "fleet.plan", "--json", "-f", fleet)
    _collect(env, secrets, "first")
    cli("--debug", "plan", "-f", fleet)
    cli("show", "-f", fleet)
    cli("show", "--json", "-f", fleet)
    listed = cli("state", "list", "-f", fleet).stdout.split()
    for address in [a for a in listed if "token" in a.lower() or "/Secret/" in a]:
        cli("state", "show", address, "-f", fleet)
    joins = [env.tmp / "c2-join.yaml", env.tmp / "c2-join-fleetplan.yaml"]
    cli("join-config", "export", "--member", env.members[0].name, "-o", str(joins[0]), "-f", fleet)
    cli("join-config", "export", "--member", env.members[0].name, "-o", str(joins[1]), "--format", "fleetplan",
        "-f", fleet)
    # A failing run that also rotates tokens: c3's credential plugin fails, c2's token is re-minted.
    broken = env.write("broken", {"leader": env.leader_spec(), "members": [
        env.member_spec(env.members[0]),
        {"name": env.members[1].name, "kubeconfig": _broken_member_kubeconfig(env),
         "context": env.members[1].context}], "tokens": {"ttl": "24h", "rotateBefore": "23h59m59s"}}, state="fleet")
    failing = [cli("--debug", "plan", "-f", str(broken), check=None),
               cli("--debug", "apply", "--auto-approve", "-f", str(broken), check=None),
               cli("apply", "--auto-approve", "--json", "-f", str(broken), check=None)]
    cli("apply", "--auto-approve", "-f", fleet)
    _collect(env, secrets, "after rotation")

    artifacts: dict[str, bytes | str] = {}
    for i, (command, done) in enumerate(env.cli_runs):
        artifacts[f"#{i} `{command}` stdout"] = done.stdout
        artifacts[f"#{i} `{command}` stderr"] = done.stderr
    plan_file = env.tmp / "fleet.plan"
    artifacts["plan file"] = plan_file.read_bytes()
    if zipfile.is_zipfile(plan_file):
        with zipfile.ZipFile(plan_file) as archive:
            artifacts |= {f"plan file member {n}": archive.read(n) for n in archive.namelist()}
    for path in sorted(env.tmp.glob("fleet.state.json*")):
        artifacts[f"state file {path.name}"] = path.read_bytes()
    cluster_meta = _owned_objects(env, fleet_name)
    artifacts |= cluster_meta
    join_texts = {f"join file {p.name}": p.read_text() for p in joins}
    for name, text in join_texts.items():  # the exported token is a secret too
        for doc in YAML(typ="safe").load_all(text):
            if isinstance(doc, dict) and isinstance(doc.get("token"), str):
                secrets.add(f"token in {name}", doc["token"])
            encoded = (doc.get("data") or {}).get("token") if isinstance(doc, dict) else None
            if encoded:
                secrets.add(f"token in {name}", base64.b64decode(encoded).decode())
    hits = secrets.scan(artifacts)
    control = secrets.scan(join_texts)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in joins}
    rotated = len({label.split(" token")[0] for label in secrets.values if "token" in label})
    failed_ok = [d.returncode for d in failing]
    groups = {"CLI output (stdout+stderr of every run)": [a for a in artifacts if a.startswith("#")],
              "plan file": [a for a in artifacts if a.startswith("plan file")],
              "state file and backup": [a for a in artifacts if a.startswith("state file")],
              "annotations and labels of owned objects": list(cluster_meta)}
    for what, names in groups.items():
        found = [h for h in hits if h[0] in names]
        record("secrets", what=what, artifacts=len(names), values=len(secrets.values), hits=len(found),
               ok=not found)
    record("secrets", what=f"join files (positive control; modes {', '.join(modes.values())})",
           artifacts=len(joins), values=len(secrets.values), hits=f"{len(control)} (expected > 0)",
           ok=bool(control) and set(modes.values()) == {"0o600"})
    assert not hits, f"secret values found: {hits}"
    assert control, "the scanner did not find the token in the join files: it would miss leaks too"
    assert set(modes.values()) == {"0o600"}, modes
    assert failed_ok[1] == 1 and failed_ok[2] == 1, [d.stderr[-500:] for d in failing]
    assert rotated >= 2 and len(env.cli_runs) >= 15


def test_no_ocm_secret_value_leaves_the_clusters(ocm_fleet: Any) -> None:
    """The OCM fleet: bootstrap tokens minted at apply time, delivered inside a kubeconfig Secret."""
    from fleetkit import STACK_KINDS, cli_env
    from ruamel.yaml import YAML as Yaml

    from fleetplan.live.clusters import KubeCluster
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.reading import selector

    env = ocm_fleet
    fleet_name = json.loads(Path(env.fleet_file).read_text())["metadata"]["name"]
    runs = []

    def cli(*args: str, check: int | None = 0) -> Any:
        import subprocess
        import sys

        done = subprocess.run([sys.executable, "-m", "fleetplan", *args, "-f", str(env.fleet_file)], cwd=env.tmp,
                              env=cli_env(), capture_output=True, text=True, timeout=600)
        runs.append((" ".join(args), done))
        assert check is None or done.returncode == check, done.stderr[-2000:]
        return done

    cli("destroy", "--auto-approve", "--force")  # so that the plan below mints fresh tokens
    cli("plan")
    cli("plan", "--json")
    cli("plan", "-out", "ocm.plan")
    cli("show", "ocm.plan")
    cli("show", "ocm.plan", "--json")
    cli("apply", "ocm.plan", "--json")
    cli("--debug", "plan")
    cli("show")
    cli("show", "--json")
    for address in [a for a in cli("state", "list").stdout.split() if "oken" in a or "/Secret/" in a]:
        cli("state", "show", address)
    secrets = SecretSet()
    for spoke in env.spokes:
        status, raw = admin_rest(spoke).request(
            "GET", "/api/v1/namespaces/open-cluster-management-agent/secrets/bootstrap-hub-kubeconfig")
        if status == 200:
            config = Yaml(typ="safe").load(base64.b64decode(json.loads(raw)["data"]["kubeconfig"]).decode())
            for user in config.get("users") or []:
                secrets.add(f"bootstrap token delivered to {spoke.name}", (user.get("user") or {}).get("token"))
    for item in admin_rest(env.hub).get("/api/v1/namespaces/open-cluster-management/secrets").get("items", []):
        token = (item.get("data") or {}).get("token")
        if token:
            secrets.add(f"hub Secret {item['metadata']['name']} token", base64.b64decode(token).decode())
    for cluster in (env.hub, *env.spokes):
        user = json.loads(Path(cluster.kubeconfig).read_text())["users"][0]["user"]
        secrets.add(f"{cluster.name} admin client key", base64.b64decode(user["client-key-data"]).decode())

    artifacts: dict[str, bytes | str] = {}
    for i, (command, done) in enumerate(runs):
        artifacts[f"#{i} `{command}` stdout"], artifacts[f"#{i} `{command}` stderr"] = done.stdout, done.stderr
    artifacts["plan file"] = (env.tmp / "ocm.plan").read_bytes()
    for path in sorted(env.tmp.glob("state.json*")):
        artifacts[f"state file {path.name}"] = path.read_bytes()
    meta: dict[str, str] = {}
    for cluster in (env.hub, *env.spokes):
        api = KubeCluster(ClusterAccess(cluster.name, cluster.kubeconfig, cluster.context))
        for api_version, kind in STACK_KINDS:
            meta |= {f"{cluster.name}: {k}": v for k, v in
                     annotations_and_labels(api.list(api_version, kind, "", selector(fleet_name))).items()}
    artifacts |= meta
    hits = secrets.scan(artifacts)
    tokens = [label for label in secrets.values if "bootstrap token" in label]
    record("secrets", what=f"OCM fleet: CLI output of {len(runs)} runs, plan file, state, annotations+labels",
           artifacts=len(artifacts), values=len(secrets.values), hits=len(hits), ok=not hits and len(tokens) == 2)
    assert not hits, f"secret values found: {hits}"
    assert len(tokens) == 2, f"bootstrap tokens not found on both spokes: {tokens}"
