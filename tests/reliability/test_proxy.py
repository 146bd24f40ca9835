"""The fault-injecting lab proxy (fleetplan.lab.proxy) against a real lab API server.

Low-level checks use http.client so that no client-side retry hides what the proxy did; one check
goes through the Kubernetes client with a proxied kubeconfig, the way fleetplan itself connects.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from pathlib import Path

import pytest

from fleetplan.errors import LabError
from fleetplan.lab import LabCluster
from fleetplan.lab.proxy import Faults, TerminatingTLS, start, write_proxied_kubeconfig

# The client side of a deliberately reset or hung connection can be collected after the test that
# made it, as an unclosed SSLSocket (http.client keeps it on some failure paths): not a proxy leak.
pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]


def _admin_context(cluster: LabCluster, with_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cluster.ca)
    if with_cert:
        pki = Path(cluster.dir) / "pki"
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def _get(port: int, ctx: ssl.SSLContext, path: str = "/version", token: str | None = None,
         host: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_tcp_mode_passes_tls_end_to_end_and_adds_latency(lab):
    cluster = lab.clusters[0]
    with start(cluster.host, cluster.api_port, latency=0.2) as proxy:
        t0 = time.monotonic()
        status, _, body = _get(proxy.port, _admin_context(cluster))
        elapsed = time.monotonic() - t0
        assert status == 200 and b"gitVersion" in body
        assert elapsed >= 0.4, elapsed  # one delay per connection, one per client->server chunk
        assert proxy.stats.connections == 1


def test_tcp_mode_resets_then_recovers(lab):
    cluster = lab.clusters[0]
    with start(cluster.host, cluster.api_port, faults=Faults(reset_first=2)) as proxy:
        for _ in range(2):
            with pytest.raises((ConnectionResetError, ssl.SSLError, ConnectionAbortedError,
                                http.client.RemoteDisconnected, OSError)):
                _get(proxy.port, _admin_context(cluster))
        assert _get(proxy.port, _admin_context(cluster))[0] == 200
        assert proxy.stats.resets == 2


def test_refuse_closes_the_port_and_reopens_it(lab):
    cluster = lab.clusters[0]
    with start(cluster.host, cluster.api_port) as proxy:
        assert _get(proxy.port, _admin_context(cluster))[0] == 200
        proxy.set_faults(refuse=True)
        with pytest.raises(ConnectionRefusedError):
            _get(proxy.port, _admin_context(cluster))
        proxy.set_faults(refuse=False)
        assert _get(proxy.port, _admin_context(cluster))[0] == 200


def test_hang_accepts_and_never_answers(lab):
    cluster = lab.clusters[0]
    with start(cluster.host, cluster.api_port, faults=Faults(hang=True)) as proxy:
        conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=_admin_context(cluster), timeout=1)
        with pytest.raises((TimeoutError, ssl.SSLError, OSError)):
            conn.request("GET", "/version")
            conn.getresponse()
        conn.close()
        assert proxy.stats.hangs == 1


def test_terminating_mode_injects_http_statuses_then_forwards_as_admin(lab):
    cluster = lab.clusters[0]
    tls = TerminatingTLS.for_lab_cluster(cluster.dir)
    faults = Faults(http_status=429, http_first=2, retry_after=1)
    with start(cluster.host, cluster.api_port, faults=faults, tls=tls) as proxy:
        plain = _admin_context(cluster, with_cert=False)  # the proxy's cert is from the cluster's CA
        for _ in range(2):
            status, headers, body = _get(proxy.port, plain, "/api/v1/namespaces")
            assert status == 429 and headers["retry-after"] == "1"
            assert json.loads(body)["code"] == 429
        status, _, body = _get(proxy.port, plain, "/api/v1/namespaces")
        assert status == 200 and json.loads(body)["kind"] == "NamespaceList"
        proxy.set_faults(Faults(http_status=503, http_every=2))
        statuses = [_get(proxy.port, plain, "/version")[0] for _ in range(4)]
        assert statuses == [200, 503, 200, 503]
        assert proxy.stats.injected == {429: 2, 503: 2}


def test_terminating_mode_forwards_a_bearer_token_without_the_admin_cert(lab, lab_client, lab_namespace):
    from kubernetes import client

    cluster = lab.clusters[0]
    ns = lab_namespace(cluster)
    core = client.CoreV1Api(lab_client(cluster))
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="probe")))
    token = core.create_namespaced_service_account_token("probe", ns, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))).status.token
    with start(cluster.host, cluster.api_port, tls=TerminatingTLS.for_lab_cluster(cluster.dir)) as proxy:
        plain = _admin_context(cluster, with_cert=False)
        status, _, _ = _get(proxy.port, plain, "/api/v1/namespaces", token=token)
        assert status == 403  # the service account, not the admin, reached the API server
        status, _, _ = _get(proxy.port, plain, "/api/v1/namespaces")
        assert status == 200


def test_proxied_kubeconfig_works_with_the_kubernetes_client(lab, tmp_path):
    from kubernetes import client, config

    cluster = lab.clusters[1]
    with start(cluster.host, cluster.api_port, latency=0.01) as proxy:
        path = write_proxied_kubeconfig(cluster.kubeconfig, cluster.context, proxy.server, tmp_path / "kc")
        assert path.stat().st_mode & 0o777 == 0o600
        api = config.new_client_from_config(config_file=str(path), context=cluster.context)
        try:
            names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
        finally:
            api.close()
        assert "kube-system" in names and proxy.stats.connections >= 1


@pytest.mark.parametrize("listen,target", [("0.0.0.0", "127.0.0.1"), ("127.0.0.1", "10.1.2.3"),
                                           ("::", "127.0.0.1")])
def test_only_loopback_addresses_are_accepted(listen, target):
    with pytest.raises(LabError, match="not a loopback address"):
        start(target, 6443, listen_host=listen)
