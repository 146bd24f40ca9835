"""An OCM hub and two spokes in the lab, converged by the real engine from one fleet.yaml.

The hub operator and the spokes' registration agents are SIMULATIONS (fleetplan.lab.simulators.ocm);
they act with only what fleetplan delivered (the bootstrap kubeconfig), under the hub's real RBAC
and real CSR signing. The second spoke is reached through a kubeconfig whose credentials come from
an exec plugin (a script printing an ExecCredential).
"""

from __future__ import annotations

import base64
import json
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kit.fleets import MIRROR
from ruamel.yaml import YAML

from fleetplan.addrs import Address
from fleetplan.apply.executing import ClusterExecutor
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import walk_plan
from fleetplan.cli.planning import Session
from fleetplan.lab import Lab
from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.simulators.ocm import AGENT_NS, CredentialRest, HubOperatorSimulation, RegistrationAgentSimulation
from fleetplan.plan import fleets, planning
from fleetplan.plan.model import Action, Mode, Plan

pytestmark = pytest.mark.integration
CLUSTERS = "/apis/cluster.open-cluster-management.io/v1/managedclusters"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def _exec_kubeconfig(tmp: Path, cluster: Any) -> Path:
    """A kubeconfig for `cluster` whose client certificate comes from an exec plugin."""
    admin = json.loads(Path(cluster.kubeconfig).read_text())
    user = admin["users"][0]["user"]
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": base64.b64decode(user["client-certificate-data"]).decode(),
                             "clientKeyData": base64.b64decode(user["client-key-data"]).decode()}}
    secret = tmp / "credential.json"
    secret.write_text(json.dumps(credential))
    secret.chmod(0o600)
    script = tmp / "print-credential"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(secret)!r}).read())\n")
    script.chmod(stat.S_IRWXU)
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "exec",
              "clusters": [{"name": cluster.name, "cluster": admin["clusters"][0]["cluster"]}],
              "users": [{"name": "exec", "user": {"exec": {
                  "apiVersion": "client.authentication.k8s.io/v1", "command": str(script),
                  "interactiveMode": "Never"}}}],
              "contexts": [{"name": "exec", "context": {"cluster": cluster.name, "user": "exec"}}]}
    path = tmp / "exec-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def _write_fleet(tmp: Path, lab: Lab, members: list[str], suffix: str, file: str = "fleet.yaml",
                 **spec: Any) -> Path:
    hub, west, east = lab.clusters[0], lab.clusters[1], lab.clusters[2]
    entries = {west.name: {"name": west.name, "kubeconfig": west.kubeconfig, "context": west.context,
                           "labels": {"env": "prod"}},
               east.name: {"name": east.name, "kubeconfig": str(_exec_kubeconfig(tmp, east))}}
    doc = {"apiVersion": "fleetplan.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": f"ocm-{suffix}"},
           "spec": {"stack": "ocm", "version": "v1.3.1", "manifests": {"mirror": str(MIRROR)},
                    "clusterSet": {"name": f"set-{suffix}"},
                    "leader": {"name": hub.name, "kubeconfig": hub.kubeconfig, "context": hub.context},
                    "members": [entries[m] for m in members],
                    "ocm": {"managedClusterSetBindings": ["default"]},
                    "wait": {"timeout": "1m"}, "state": {"path": str(tmp / "state.json")}, **spec}}
    path = tmp / file
    path.write_text(json.dumps(doc))
    return path


def converge(fleet_file: Path, mode: Mode = Mode.NORMAL, force: bool = False) -> tuple[Plan, Any]:
    """What `fleetplan apply --auto-approve` does: plan, then walk with the state recorder."""
    session = Session.open(str(fleet_file))
    state = session.store.read()
    plan = session.make_plan(state, planning.Options(mode=mode, force=force,
                                                     wait_timeout=session.fleet.spec.wait.timeout_seconds))
    clusters = fleets.connect(fleets.accesses_for(session.fleet))
    summary = walk_plan(plan, ClusterExecutor(plan, clusters, default_timeout=120),
                        StateRecorder(session.store, state, session.fleet.name))
    return plan, summary


def replan(fleet_file: Path) -> Plan:
    session = Session.open(str(fleet_file))
    return session.make_plan(session.store.read(), planning.Options())


def changes(plan: Plan) -> list[str]:
    return [f"{s.action.value} {s.address}: {s.reason}" for s in plan.steps if s.action != Action.NOOP]


def leftovers(fleet_file: Path, clusters: set[str], hub_names: tuple[str, ...] = ()) -> list[str]:
    """Objects of the fleet in `fleet_file` still on `clusters` (and hub objects whose name holds one
    of `hub_names`): what fleetplan created that a removal or destroy should have deleted."""
    session = Session.open(str(fleet_file))
    connected = fleets.connect(fleets.accesses_for(session.fleet))
    found = []
    for resource in session.desired.resources:
        address = resource.address
        if address.group == "fleetplan.dev":
            continue
        if address.cluster not in clusters and not any(n in address.name for n in hub_names):
            continue
        obj = connected[address.cluster].get(str(resource.body["apiVersion"]), address.kind,
                                             address.namespace, address.name)
        if obj is not None and not obj["metadata"].get("deletionTimestamp"):
            found.append(str(address))
    return found


def _intruder_csr(hub: Any, cluster: str) -> str:
    """A pending CSR for `cluster`, valid in every respect except its requester (the lab admin)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    group = f"system:open-cluster-management:{cluster}"
    request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
        x509.NameAttribute(NameOID.COMMON_NAME, f"{group}:intruder")])).sign(
            ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
    name = f"{cluster}-intruder-{uuid.uuid4().hex[:5]}"
    hub.call("POST", CSRS, {"metadata": {"name": name, "labels": {"open-cluster-management.io/cluster-name": cluster}},
                            "spec": {"request": base64.b64encode(
                                         request.public_bytes(serialization.Encoding.PEM)).decode(),
                                     "signerName": "kubernetes.io/kube-apiserver-client",
                                     "usages": ["digital signature", "client auth"]}})
    return name


@pytest.fixture
def ocm_lab(lab: Lab, tmp_path: Path) -> Iterator[dict[str, Any]]:
    logs: list[str] = []
    hub = HubOperatorSimulation(lab.clusters[0], "v1.3.1", MIRROR, log=logs.append).start()
    agents = {c.name: RegistrationAgentSimulation(c, log=logs.append).start() for c in lab.clusters[1:3]}
    suffix = uuid.uuid4().hex[:5]
    fleet = _write_fleet(tmp_path, lab, [c.name for c in lab.clusters[1:3]], suffix)
    try:
        yield {"lab": lab, "tmp": tmp_path, "suffix": suffix, "agents": agents, "logs": logs, "fleet": fleet}
    finally:
        try:  # leave the shared lab clean for the next test, whatever happened
            if Session.open(str(fleet)).store.read():
                converge(fleet, Mode.DESTROY, force=True)
        finally:
            for agent in agents.values():
                agent.stop()
            hub.stop()


def _failures(summary: Any) -> list[str]:
    return [f"{o.step.address}: {o.error.summary if o.error else o.root_cause}"
            for o in (*summary.failures, *summary.skipped)]


def test_apply_accepts_both_spokes_removal_is_guarded_and_destroy_leaves_nothing(
        ocm_lab: dict[str, Any]) -> None:
    lab, fleet_file = ocm_lab["lab"], ocm_lab["fleet"]
    hub = admin_rest(lab.clusters[0])
    west, east = lab.clusters[1].name, lab.clusters[2].name
    intruder = _intruder_csr(hub, west)
    try:
        _, summary = converge(fleet_file)
        assert not _failures(summary), "\n".join(_failures(summary) + ocm_lab["logs"][-20:])
        # A CSR for the same cluster from another requester is never approved.
        assert not (hub.get(f"{CSRS}/{intruder}").get("status") or {}).get("conditions")
    finally:
        hub.request("DELETE", f"{CSRS}/{intruder}")
    for cluster in lab.clusters[1:3]:
        managed = hub.get(f"{CLUSTERS}/{cluster.name}")
        assert managed["spec"]["hubAcceptsClient"] is True
        assert managed["metadata"]["labels"]["cluster.open-cluster-management.io/clusterset"] == \
            f"set-{ocm_lab['suffix']}"
        identity = ocm_lab["agents"][cluster.name].hub_identity
        assert identity is not None, ocm_lab["logs"][-20:]
        assert identity["username"] == f"system:open-cluster-management:{cluster.name}:simagent"
        assert f"system:open-cluster-management:{cluster.name}" in identity["groups"]
    assert hub.get(f"{CLUSTERS}/{west}")["metadata"]["labels"]["env"] == "prod"
    assert changes(replan(fleet_file)) == []
    assert all("simulation" in line for line in ocm_lab["logs"])

    # Removing a spoke is refused while a ManifestWork targets it, and then nothing of it is touched.
    works = f"/apis/work.open-cluster-management.io/v1/namespaces/{west}/manifestworks"
    hub.call("POST", works, {"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                             "metadata": {"name": "app"}, "spec": {"workload": {"manifests": []}}})
    smaller = _write_fleet(ocm_lab["tmp"], lab, [east], ocm_lab["suffix"], "smaller.yaml")
    _, summary = converge(smaller)
    [failure] = summary.failures
    assert failure.error is not None and "ManifestWork" in failure.error.summary, _failures(summary)
    assert "refusing" in failure.error.summary and str(failure.step.address).endswith(f"ClusterAcceptance/-/{west}")
    assert summary.skipped and all(o.root_cause == failure.step.address for o in summary.skipped)
    assert not [o for o in summary.outcomes if o.status.value == "ok" and o.step.action == Action.DELETE]
    assert hub.get(f"{CLUSTERS}/{west}")["spec"]["hubAcceptsClient"] is True
    spoke = admin_rest(lab.clusters[1])
    assert spoke.request("GET", "/apis/operator.open-cluster-management.io/v1/klusterlets/klusterlet")[0] == 200

    # Once the ManifestWork is gone the removal goes through and leaves nothing of that spoke.
    hub.call("DELETE", f"{works}/app")
    _, summary = converge(smaller)
    assert not _failures(summary), _failures(summary)
    assert hub.request("GET", f"{CLUSTERS}/{west}")[0] == 404
    namespace = hub.request("GET", f"/api/v1/namespaces/{west}")
    assert namespace[0] == 404 or json.loads(namespace[1])["metadata"].get("deletionTimestamp")
    assert hub.get(f"{CSRS}?labelSelector=open-cluster-management.io/cluster-name={west}")["items"] == []
    assert leftovers(fleet_file, {west}, hub_names=(west,)) == []
    assert changes(replan(smaller)) == []

    # destroy leaves nothing fleetplan created on any cluster.
    _, summary = converge(smaller, Mode.DESTROY)
    assert not _failures(summary), _failures(summary)
    assert hub.request("GET", f"{CLUSTERS}/{east}")[0] == 404
    assert leftovers(fleet_file, {c.name for c in lab.clusters[:3]}) == []
    state = Session.open(str(smaller)).store.read()
    assert state is not None and not state.resources and not state.journal


def test_a_csr_from_another_requester_is_not_approved(ocm_lab: dict[str, Any], tmp_path: Path) -> None:
    from fleetplan.live.clusters import KubeCluster
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.ocm_accept import Verdict, judge_csrs
    from fleetplan.live.ocm_handlers import ClusterOcmHub

    lab = ocm_lab["lab"]
    hub_cluster = lab.clusters[0]
    rest = admin_rest(hub_cluster)
    name = f"intruder-{ocm_lab['suffix']}"
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    group = f"system:open-cluster-management:{name}"
    request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, group),
        x509.NameAttribute(NameOID.COMMON_NAME, f"{group}:x")])).sign(ec.generate_private_key(ec.SECP256R1()),
                                                                      hashes.SHA256())
    rest.call("POST", CSRS, {"metadata": {"name": name, "labels": {"open-cluster-management.io/cluster-name": name}},
                             "spec": {"request": base64.b64encode(
                                          request.public_bytes(serialization.Encoding.PEM)).decode(),
                                      "signerName": "kubernetes.io/kube-apiserver-client",
                                      "usages": ["digital signature", "client auth"]}})
    try:
        hub = ClusterOcmHub(KubeCluster(ClusterAccess(hub_cluster.name, hub_cluster.kubeconfig, hub_cluster.context)))
        bootstrap = f"system:serviceaccount:open-cluster-management:agent-registration-bootstrap-{name}"
        verdicts = judge_csrs(name, [bootstrap], hub.list_cluster_csrs(name))
        assert [(v.name, v.verdict) for v in verdicts] == [(name, Verdict.IGNORE)]
        assert "not by the bootstrap identity" in verdicts[0].reason
        assert not (rest.get(f"{CSRS}/{name}").get("status") or {}).get("conditions")
    finally:
        rest.request("DELETE", f"{CSRS}/{name}")


def _bootstrap_token(spoke: Any) -> str:
    """The token inside the spoke's bootstrap-hub-kubeconfig (read as the agent would; never shown)."""
    secret = admin_rest(spoke).get(f"/api/v1/namespaces/{AGENT_NS}/secrets/bootstrap-hub-kubeconfig")
    kubeconfig = YAML(typ="safe").load(base64.b64decode(secret["data"]["kubeconfig"]).decode())
    return str(kubeconfig["users"][0]["user"]["token"])


def _who(hub_cluster: Any, token: str) -> tuple[int, str]:
    """(HTTP status, username) of a SelfSubjectReview on the hub with `token`."""
    ca = Path(hub_cluster.ca).read_text()
    status, data = CredentialRest(hub_cluster.server, ca, token=token).request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    user = json.loads(data).get("status", {}).get("userInfo", {}).get("username", "") if status < 300 else ""
    return status, user


def _token_expiry(fleet_file: Path, address: str) -> float:
    state = Session.open(str(fleet_file)).store.read()
    assert state is not None
    return datetime.fromisoformat(state.resources[Address.parse(address)].outputs["expiry"]).timestamp()


def test_bootstrap_token_expires_and_a_fresh_one_is_minted_only_while_a_spoke_needs_it(
        ocm_lab: dict[str, Any]) -> None:
    lab = ocm_lab["lab"]
    hub, spoke = lab.clusters[0], lab.clusters[1]
    token = f"{hub.name}/fleetplan.dev/BootstrapToken/kube-system/agent-registration-bootstrap-{spoke.name}"
    agent = ocm_lab["agents"][spoke.name]
    agent.stop()  # the spoke's agent is down: the spoke cannot join with the first token
    fleet = _write_fleet(ocm_lab["tmp"], lab, [spoke.name], ocm_lab["suffix"], "token.yaml",
                         ocm={"bootstrapToken": {"kind": "secret", "ttl": "30s"}}, wait={"timeout": "8s"})
    _, summary = converge(fleet)
    assert [str(o.step.address) for o in summary.failures] == [
        f"{hub.name}/fleetplan.dev/ClusterAcceptance/-/{spoke.name}"], _failures(summary)
    first = _bootstrap_token(spoke)
    status, user = _who(hub, first)
    assert status == 201 and user.startswith("system:bootstrap:"), status
    expiry = _token_expiry(fleet, token)
    assert 0 < expiry - time.time() <= 30

    # The token expires as configured: the API server no longer accepts it.
    time.sleep(max(0.0, expiry - time.time()) + 2)
    assert _who(hub, first)[0] == 401
    planned = {str(s.address): s for s in replan(fleet).steps}
    assert planned[token].action == Action.UPDATE and "expired" in planned[token].reason
    assert planned[f"{spoke.name}/core/Secret/{AGENT_NS}/bootstrap-hub-kubeconfig"].action == Action.UPDATE

    # The spoke still needs one: the next apply mints a fresh token, and the spoke joins with it.
    agent.start()
    _, summary = converge(fleet)
    assert not _failures(summary), _failures(summary) + ocm_lab["logs"][-10:]
    second = _bootstrap_token(spoke)
    assert second != first and _who(hub, second)[0] == 201
    assert agent.hub_identity is not None

    # Once it has expired too, nothing needs it any more: no fresh token, "No changes".
    time.sleep(max(0.0, _token_expiry(fleet, token) - time.time()) + 2)
    assert _who(hub, second)[0] == 401
    again = replan(fleet)
    assert changes(again) == []
    assert "no longer uses it" in next(s.reason for s in again.steps if str(s.address) == token)
