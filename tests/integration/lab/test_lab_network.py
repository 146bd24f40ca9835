"""Addresses in the lab: clusters reach each other on loopback, and tests serve Services' webhooks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from kubernetes import client
from labkit import wait_until

from fleetplan.lab import AdmissionDecision, admission_handler, find_endpoint, serve_service

pytestmark = pytest.mark.integration

# A separate process on cluster A's address dials cluster B's API server, trusting only `ca`.
_DIAL = textwrap.dedent("""
    import http.client, json, ssl, sys
    source, host, port, ca, token = sys.argv[1:6]
    ctx = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, source_address=(source, 0), timeout=20)
    try:
        conn.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                     body=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        print(json.dumps({"status": resp.status, "source": conn.sock.getsockname()[0],
                          "user": body.get("status", {}).get("userInfo", {}).get("username")}))
    except ssl.SSLCertVerificationError as err:
        print(json.dumps({"tls_error": err.verify_message}))
""")


def _dial(source, target, ca, token):
    out = subprocess.run([sys.executable, "-c", _DIAL, source, target.host, str(target.api_port), ca, token],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_a_process_on_cluster_a_reaches_cluster_b_with_b_ca(lab, lab_client, lab_namespace):
    a, b = lab.clusters[0], lab.clusters[1]
    assert a.host != b.host
    core_b = client.CoreV1Api(lab_client(b))
    ns = lab_namespace(b)
    core_b.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="peer")))
    token = core_b.create_namespaced_service_account_token("peer", ns, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))).status.token

    reached = _dial(a.host, b, b.ca, token)
    assert reached == {"status": 201, "source": a.host, "user": f"system:serviceaccount:{ns}:peer"}
    # Each cluster has its own CA: A's CA does not vouch for B's API server.
    refused = _dial(a.host, b, a.ca, token)
    assert "tls_error" in refused


def _webhook_backend(ns, name, port, host_network):
    labels = {"app": name}
    container = client.V1Container(name="webhook", image="registry.invalid/webhook:1",
                                   ports=[client.V1ContainerPort(name="https", container_port=port)])
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels=labels),
                                         spec=client.V1PodSpec(containers=[container], host_network=host_network))))
    service = client.V1Service(metadata=client.V1ObjectMeta(name=name), spec=client.V1ServiceSpec(
        selector=labels, ports=[client.V1ServicePort(name="https", port=443, target_port="https")]))
    return deployment, service


@pytest.mark.parametrize("host_network", [False, True], ids=["pod-network", "host-network"])
def test_a_test_server_receives_admission_calls_for_a_service_backed_webhook(
        lab, lab_client, lab_namespace, host_network):
    cluster = lab.clusters[2]
    api = lab_client(cluster)
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    ns = lab_namespace(cluster)
    port = 9443 if not host_network else 19443
    deployment, service = _webhook_backend(ns, "guard", port, host_network)
    client.AppsV1Api(api).create_namespaced_deployment(ns, deployment)
    core.create_namespaced_service(ns, service)

    address, endpoint_port = find_endpoint(cluster, ns, "guard", "https")
    pod = core.list_namespaced_pod(ns, label_selector="app=guard").items[0]
    assert (address, endpoint_port) == (pod.status.pod_ip, port)
    assert address == cluster.node_ip if host_network else address.startswith(f"10.{cluster.index}.")

    def decide(request):
        labels = (request.get("object") or {}).get("metadata", {}).get("labels") or {}
        if labels.get("deny") == "yes":
            return AdmissionDecision(False, "denied by the lab test webhook")
        return AdmissionDecision(True)

    hook = f"guard-{ns}"
    with serve_service(cluster, ns, "guard", admission_handler(decide), port="https") as server:
        admission.create_validating_webhook_configuration(client.V1ValidatingWebhookConfiguration(
            metadata=client.V1ObjectMeta(name=hook),
            webhooks=[client.V1ValidatingWebhook(
                name="guard.lab.fleetplan.dev", admission_review_versions=["v1"], side_effects="None",
                failure_policy="Fail", timeout_seconds=10,
                namespace_selector=client.V1LabelSelector(match_labels={"kubernetes.io/metadata.name": ns}),
                client_config=client.AdmissionregistrationV1WebhookClientConfig(
                    ca_bundle=server.ca_bundle_b64,
                    service=client.AdmissionregistrationV1ServiceReference(
                        namespace=ns, name="guard", path="/validate", port=443)),
                rules=[client.V1RuleWithOperations(api_groups=[""], api_versions=["v1"], operations=["CREATE"],
                                                   resources=["configmaps"])])]))
        try:
            def denied_once():
                try:
                    core.create_namespaced_config_map(ns, client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(generate_name="bad-", labels={"deny": "yes"})))
                except client.ApiException as err:
                    return err.status == 403 and "denied by the lab test webhook" in err.body
                return False  # the webhook configuration was not active yet: the create passed
            wait_until("the webhook to deny a labelled ConfigMap", denied_once, timeout=60)
            core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="good")))
        finally:
            admission.delete_validating_webhook_configuration(hook)

    calls = [r for r in server.requests if r.path.startswith("/validate")]
    assert calls, "the API server never called the test server"
    reviews = [c.json()["request"] for c in calls]
    assert any(r["name"] == "good" and r["namespace"] == ns for r in reviews)
    # What the API server dialled: the EndpointSlice address and port (its egress proxy logs the
    # CONNECT), landing on that address's loopback twin; TLS name <svc>.<ns>.svc.
    assert {c.local for c in calls} == {(cluster.loopback_for(address), port)}
    proxy_log = (cluster.logs_dir / "egress-proxy.log").read_text()
    assert f"CONNECT {address}:{port} -> {cluster.loopback_for(address)}:{port}" in proxy_log
    assert {c.server_name for c in calls} == {f"guard.{ns}.svc"}
    assert all(c.client[0].startswith("127.") for c in calls)


def test_lab_health_probes_ignore_proxy_variables(lab, monkeypatch):
    """The lab's own readiness probes go straight to loopback: a proxy set in the environment (here
    one that refuses every connection) must not be used, as urllib's default opener would."""
    from fleetplan.lab.clusters import _etcd_healthy, _insecure_health

    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # discard port: nothing listens, connections refused
    cluster = lab["c1"]
    assert _etcd_healthy(cluster.host, cluster.ports["etcd-client"])
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert _insecure_health(cluster.host, cluster.ports[component])
