"""Serving a lab cluster's Service from a test-side process: admission webhooks, aggregated APIs.

How a call reaches the test (see docs/lab.md, "Serving a Service from a test"):

1. A Pod selected by the Service is scheduled on the cluster's kwok node. kwok gives it an address
   in the cluster's pod network 10.<i>.0.0/16 (hostNetwork pods: the node's 10.<i>.255.254), and
   kube-controller-manager writes it into the Service's EndpointSlice. (EndpointSlices refuse
   loopback addresses, so pods cannot simply get 127.x addresses.)
2. The API server runs with `--enable-aggregator-routing=true`, so for a webhook or APIService that
   names a Service it dials the EndpointSlice address and port (never the ClusterIP), with TLS
   server name `<service>.<namespace>.svc`, through its egress selector: the lab's CONNECT proxy
   (fleetplan.lab.egress) lands 10.<i>.a.b:port on 127.<i>.a.b:port.
3. `serve_service` reads that endpoint and binds an HTTPS server on its loopback twin, with a
   certificate for the Service's DNS names from a CA whose PEM (`ca_bundle`) the caller puts in
   `caBundle`.

The server records every request (and the TLS server name the client asked for), so a test can
assert that the API server really called it. Handlers are plain functions of `WebhookRequest`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fleetplan.errors import LabError
from fleetplan.lab.clusters import admin_rest
from fleetplan.lab.pki import CertificateAuthority
from fleetplan.lab.state import LabCluster


@dataclass(frozen=True)
class WebhookRequest:
    """One HTTP request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client: tuple[str, int]
    local: tuple[str, int]
    server_name: str | None  # the TLS SNI the client sent

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class WebhookResponse:
    status: int = 200
    body: Any = None  # JSON-encoded unless bytes
    content_type: str = "application/json"


Handler = Callable[[WebhookRequest], WebhookResponse]


@dataclass(frozen=True)
class AdmissionDecision:
    allowed: bool = True
    message: str = ""
    patch: list[dict[str, Any]] | None = None  # a JSONPatch for mutating webhooks


def admission_handler(decide: Callable[[dict[str, Any]], AdmissionDecision]) -> Handler:
    """Wrap a function of the AdmissionReview `request` into a handler that answers the review."""

    def handle(req: WebhookRequest) -> WebhookResponse:
        review = req.json() or {}
        request = review.get("request") or {}
        decision = decide(request)
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": decision.allowed}
        if decision.message:
            response["status"] = {"message": decision.message, "code": 200 if decision.allowed else 403}
        if decision.patch is not None:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode()
        return WebhookResponse(body={"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                                     "kind": "AdmissionReview", "response": response})

    return handle


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local")


@dataclass
class _Recorder:
    requests: list[WebhookRequest] = field(default_factory=list)
    sni: dict[int, str | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], ctx: ssl.SSLContext, handler: Handler,
                 recorder: _Recorder) -> None:
        self.ctx, self.app, self.recorder = ctx, handler, recorder
        self.connections: set[socket.socket] = set()
        super().__init__(address, _RequestHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so one slow client
        # cannot hold up the accept loop.
        tls = self.ctx.wrap_socket(request, server_side=True)
        with self.recorder.lock:
            self.connections.add(tls)
        try:
            super().finish_request(tls, client_address)
        finally:
            with self.recorder.lock:
                self.connections.discard(tls)
            # wrap_socket detached the original socket, so socketserver's own close misses this one.
            with contextlib.suppress(OSError):
                tls.shutdown(socket.SHUT_RDWR)
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # handshake failures and resets are the client's business; requests are recorded


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        rec = self.server.recorder
        with rec.lock:
            sni = rec.sni.get(id(self.connection))
        local = self.connection.getsockname()
        req = WebhookRequest(self.command, self.path, dict(self.headers.items()), body,
                             (self.client_address[0], self.client_address[1]), (local[0], local[1]), sni)
        with rec.lock:
            rec.requests.append(req)
        try:
            resp = self.server.app(req)
        except Exception as err:  # a handler bug must answer 500, not hang the API server
            resp = WebhookResponse(500, {"error": f"{type(err).__name__}: {err}"})
        data = resp.body if isinstance(resp.body, bytes) else json.dumps(resp.body).encode()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class ServiceServer:
    """An HTTPS server bound at `host:port`, presenting a certificate for `dns_names`.

    Use as a context manager, or `start()`/`stop()`. `ca_bundle` is the PEM of the issuing CA
    (`ca_bundle_b64` for a webhook's `caBundle` field); pass `ca` to share one CA between servers.
    """

    def __init__(self, host: str, port: int, dns_names: tuple[str, ...], handler: Handler,
                 ca: CertificateAuthority | None = None) -> None:
        self.host, self.port, self.dns_names = host, port, dns_names
        self.ca = ca or CertificateAuthority.create("fleetplan-lab-webhook-ca")
        self._recorder = _Recorder()
        issued = self.ca.issue(dns_names[0], dns_names=dns_names, ips=(host,), server=True)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            issued.write(cert, key)
            ctx.load_cert_chain(cert, key)
        ctx.sni_callback = self._remember_sni
        try:
            self._server = _Server((host, port), ctx, handler, self._recorder)
        except OSError as err:
            raise LabError(f"cannot bind a service server at {host}:{port}: {err}",
                           hint="another server (or a lab with the same cluster index) holds it") from err
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def _remember_sni(self, sock: ssl.SSLObject | ssl.SSLSocket, name: str | None,
                      _ctx: ssl.SSLContext) -> None:
        with self._recorder.lock:
            self._recorder.sni[id(sock)] = name

    @property
    def ca_bundle(self) -> bytes:
        return self.ca.cert_pem

    @property
    def ca_bundle_b64(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()

    @property
    def requests(self) -> list[WebhookRequest]:
        with self._recorder.lock:
            return list(self._recorder.requests)

    def start(self) -> ServiceServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"service-server-{self.host}:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        with self._recorder.lock:
            conns = list(self._server.connections)
        for conn in conns:  # keep-alive connections from the API server would outlive us otherwise
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()

    def __enter__(self) -> ServiceServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *_: object) -> None:
        self.stop()


def find_endpoint(cluster: LabCluster, namespace: str, service: str, port: str | int | None = None,
                  timeout: float = 120.0) -> tuple[str, int]:
    """The (pod address, port) the API server will dial for `service`: a ready EndpointSlice endpoint.

    `port` picks the Service port by name or by port number; None means the Service's only port.
    Waits for the slice, because kwok and the EndpointSlice controller need a moment after a rollout.
    """
    api = admin_rest(cluster)
    svc = api.get(f"/api/v1/namespaces/{namespace}/services/{service}")
    svc_ports = svc["spec"].get("ports", [])
    chosen = [p for p in svc_ports if port is None or p.get("name") == port or p.get("port") == port]
    if len(chosen) != 1:
        raise LabError(f"service {namespace}/{service} has no single port matching {port!r}: {svc_ports}")
    port_name = chosen[0].get("name", "")
    path = (f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
            f"?labelSelector=kubernetes.io/service-name%3D{service}")
    deadline = time.monotonic() + timeout
    while True:
        for eps in api.get(path).get("items", []):
            numbers = [p["port"] for p in eps.get("ports") or []
                       if p.get("name", "") == port_name and "port" in p]
            for endpoint in eps.get("endpoints") or []:
                if numbers and endpoint.get("conditions", {}).get("ready", True):
                    return endpoint["addresses"][0], int(numbers[0])
        if time.monotonic() >= deadline:
            raise LabError(f"service {namespace}/{service} in {cluster.name} has no ready endpoint "
                           f"after {timeout:.0f}s", hint="is a selected Pod scheduled on the kwok node?")
        time.sleep(0.5)


def serve_service(cluster: LabCluster, namespace: str, service: str, handler: Handler, *,
                  port: str | int | None = None, ca: CertificateAuthority | None = None,
                  timeout: float = 120.0) -> ServiceServer:
    """Find `service`'s endpoint in `cluster` and start a server where its calls arrive.

    The server listens on the endpoint's loopback twin (`cluster.loopback_for(address)`) and the
    endpoint's port; stop it (or leave the `with` block) when done.
    """
    address, number = find_endpoint(cluster, namespace, service, port, timeout)
    return ServiceServer(cluster.loopback_for(address), number, service_dns_names(service, namespace),
                         handler, ca).start()
