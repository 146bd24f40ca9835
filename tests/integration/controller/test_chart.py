"""The Helm chart, linted and rendered by a real `helm` (built by `lab/build.sh --helm` from the
pinned Go module in lab/go/helm), its objects checked by a server-side dry-run on a lab cluster,
and its RBAC proven sufficient by running the controller as the chart's ServiceAccount.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import controllerkit as kit
import pytest
import yaml

pytestmark = pytest.mark.integration
CHART = kit.ROOT / "charts" / "fleetplan"


@pytest.fixture(scope="module")
def helm() -> str:
    path = subprocess.run(["bash", str(kit.ROOT / "lab" / "build.sh"), "--print-helm"], capture_output=True,
                          text=True, check=True).stdout.strip()
    if not os.access(path, os.X_OK):
        message = f"helm is not built at {path} (build it with `bash lab/build.sh --helm`)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def render(helm: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = [helm, "template", "rel", str(CHART), "--namespace", namespace, "--include-crds"]
    for item in sets:
        args += ["--set", item]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def test_chart_lints_and_ships_the_generated_crd(helm: str) -> None:
    done = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    docs = render(helm, "fp")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "Role",
                     "RoleBinding", "ServiceAccount"]
    crd = by_kind(docs)["CustomResourceDefinition"]
    assert crd == yaml.safe_load((kit.ROOT / "schemas" / "fleet.crd.yaml").read_text())


def test_values_reach_the_objects(helm: str) -> None:
    docs = render(helm, "fp", "controller.watchNamespace=team-a", "replicaCount=3", "image.tag=v9.9.9",
                  "controller.resync=2m", "resources.limits.memory=1Gi")
    objs = by_kind(docs)
    assert "ClusterRoleBinding" not in objs
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "fp"}
    deployment = objs["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith(":v9.9.9")
    assert "--watch-namespace=team-a" in container["args"] and "--resync=2m" in container["args"]
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_rendered_objects_pass_a_server_side_dry_run(helm: str, lab: Any, lab_namespace: Any) -> None:
    cluster = lab.clusters[0]
    api = kit.objects(cluster)
    namespace = lab_namespace(cluster.name)
    results = []
    for doc in render(helm, namespace):
        applied = api.cluster.apply(doc, dry_run=True)
        results.append((applied["kind"], applied["metadata"]["name"]))
    assert len(results) == 7
    # a dry run persists nothing
    assert api.get("apps/v1", "Deployment", namespace, "rel-fleetplan") is None


def test_the_charts_rbac_is_enough_for_the_controller(helm: str, lab: Any, lab_namespace: Any,
                                                      tmp_path: Path) -> None:
    cluster, member = lab.clusters[0], lab.clusters[1]
    api = kit.objects(cluster)
    kit.install_crd(api)
    release_ns = lab_namespace(cluster.name)
    fleet_ns = lab_namespace(cluster.name)
    suffix = uuid.uuid4().hex[:6]
    docs = render(helm, release_ns, f"serviceAccount.name=ctl-{suffix}")
    created_cluster_scoped = []
    try:
        for doc in docs:
            if doc["kind"] in ("Deployment", "CustomResourceDefinition"):
                continue
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                doc["metadata"]["name"] += f"-{suffix}"
                if doc["kind"] == "ClusterRoleBinding":
                    doc["roleRef"]["name"] += f"-{suffix}"
                created_cluster_scoped.append((doc["apiVersion"], doc["kind"], doc["metadata"]["name"]))
            api.cluster.apply(doc)
        token = api.cluster.create_subresource("v1", "ServiceAccount", release_ns, f"ctl-{suffix}", "token",
                                               {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                                "spec": {"expirationSeconds": 3600}})["status"]["token"]
        kubeconfig = tmp_path / "sa.kubeconfig"
        ca = base64.b64encode(Path(cluster.ca).read_bytes()).decode()
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "c", "cluster": {"server": cluster.server, "certificate-authority-data": ca}}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}))
        os.chmod(kubeconfig, 0o600)
        for c in (cluster, member):
            kit.kubeconfig_secret(api, fleet_ns, c)
        name = "r" + suffix
        (tmp_path / "extras").mkdir()
        (tmp_path / "extras" / "app.yaml").write_text(kit.APP.format(ns=name + "-app", color="teal"))

        as_service_account = SimpleNamespace(name="sa", kubeconfig=kubeconfig, context="sa")
        ctl = kit.Controller(tmp_path, as_service_account, release_ns, lease=f"ctl-{suffix}", watch=fleet_ns)
        try:
            body = kit.fleet_body(name, fleet_ns, cluster, [member])
            api.create(body)
            kit.wait_for("the fleet to be Ready", kit.ready_at(api, fleet_ns, name), 120)
            api.delete(kit.FLEET_API, "Fleet", fleet_ns, name)
            kit.wait_for("the Fleet to be gone", lambda: api.get(kit.FLEET_API, "Fleet", fleet_ns, name) is None, 120)
        finally:
            ctl.stop()
        assert "403" not in ctl.text() and "forbidden" not in ctl.text().lower(), ctl.text()[-2000:]
    finally:
        for api_version, kind, obj_name in created_cluster_scoped:
            api.delete(api_version, kind, "", obj_name)
