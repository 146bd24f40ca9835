"""A fault-injecting proxy in front of one lab API server, for reliability and performance tests.

Two modes, both listening on a loopback address only (anything else is refused with LabError):

* TCP (default): bytes are spliced unchanged, TLS stays end to end between client and API server,
  so client certificates, tokens and CA pins all work as without the proxy. It can add a fixed
  latency (once per connection, and to every client->server chunk counted from when it arrived, so
  chunks sent back to back share one delay as on a real link: roughly one round trip per request
  however the client splits it into writes), reset connections (RST via SO_LINGER 0), refuse
  (the listening socket is closed, so a connect gets ECONNREFUSED) or hang (accept, then never
  answer). Both relayed sockets have TCP_NODELAY, as the two ends do.
* HTTPS-terminating (`tls=TerminatingTLS(...)`): the proxy presents a certificate issued by the
  lab cluster's own CA, so a kubeconfig copy keeps its CA data; it reads each HTTP/1.1 request and
  can answer it itself with 429 (+ Retry-After), 500 or 503, or forward it to the API server.
  Client certificates cannot cross a terminating proxy: a request that carries an Authorization
  header is forwarded with that header and no client certificate; any other request is forwarded
  with the certificate given in `TerminatingTLS.client_cert` (usually the lab's admin cert).

Faults are a frozen value replaced atomically with `set_faults`; counters in `stats` say what was
injected (the reliability report reads them). Deterministic counters (`reset_first`, `http_first`,
`*_every`) come before probabilities so tests can be exact.

    handle = start(cluster.host, cluster.api_port, latency=0.02)
    write_proxied_kubeconfig(cluster.kubeconfig, cluster.context, handle.server, dest)
    handle.set_faults(Faults(http_status=503, http_first=3)); ...; handle.stop()
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import queue
import random
import socket
import ssl
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetplan.errors import LabError
from fleetplan.lab.egress import pipe
from fleetplan.lab.pki import CertificateAuthority, write_private

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
               "te", "trailer", "transfer-encoding", "upgrade"}
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Faults:
    """What the proxy does to traffic. The default passes everything through unchanged."""

    latency: float = 0.0            # seconds, per connection and per client->server chunk (pipelined)
    refuse: bool = False            # close the listener (connects get ECONNREFUSED), reset open connections
    hang: bool = False              # accept connections and never answer
    reset_first: int = 0            # RST the first N connections after these faults are set
    reset_every: int = 0            # then RST every Nth connection (0: never)
    reset_probability: float = 0.0  # then RST with this probability
    http_status: int | None = None  # terminating mode: answer with this status instead of forwarding...
    http_first: int = 0             # ...for the first N requests after these faults are set
    http_every: int = 0             # ...then every Nth request (0: never)
    http_probability: float = 0.0   # ...then with this probability
    retry_after: int | None = None  # Retry-After header (seconds) on injected answers
    seed: int = 0


@dataclass
class ProxyStats:
    """Counters since start (never reset by set_faults)."""

    connections: int = 0
    resets: int = 0
    hangs: int = 0
    requests: int = 0
    injected: dict[int, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "resets": self.resets, "hangs": self.hangs,
                "requests": self.requests, "injected": {str(k): v for k, v in self.injected.items()}}


@dataclass(frozen=True)
class TerminatingTLS:
    """HTTPS-terminating mode: the CA that signs the proxy's serving certificate, the upstream's CA
    bundle, and the client certificate (cert, key) presented upstream for requests without a token."""

    ca: CertificateAuthority
    upstream_ca: str
    client_cert: tuple[str, str] | None = None

    @classmethod
    def for_lab_cluster(cls, cluster_dir: str | Path) -> TerminatingTLS:
        pki = Path(cluster_dir) / "pki"
        return cls(CertificateAuthority.load(pki / "ca.crt", pki / "ca.key"), str(pki / "ca.crt"),
                   (str(pki / "admin.crt"), str(pki / "admin.key")))


def _require_loopback(host: str, what: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise LabError(f"the proxy's {what} {host!r} is not a loopback address",
                       hint="the lab proxy only ever listens on and connects to 127.0.0.0/8 or ::1")


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the client sees 'connection reset by peer'."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class ProxyHandle:
    """A running proxy. Thread-safe; `stop()` closes the listener and every open connection."""

    def __init__(self, target_host: str, target_port: int, listen_host: str, port: int,
                 faults: Faults, tls: TerminatingTLS | None) -> None:
        self.target_host, self.target_port, self.listen_host = target_host, target_port, listen_host
        self.port = port
        self.stats = ProxyStats()
        self._faults = faults
        self._tls = tls
        self._lock = threading.Lock()
        self._since_set = {"connections": 0, "requests": 0}
        self._random = random.Random(faults.seed)
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._server_ctx: ssl.SSLContext | None = None
        if tls is not None:
            self._server_ctx = self._make_server_context(tls)
        self._accept_thread: threading.Thread | None = None

    # -- public API -------------------------------------------------------------------------
    @property
    def server(self) -> str:
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return f"https://{host}:{self.port}"

    @property
    def faults(self) -> Faults:
        return self._faults

    def set_faults(self, faults: Faults | None = None, **changes: Any) -> None:
        """Replace the faults (or change some fields of the current ones); counters restart."""
        new = replace(faults or self._faults, **changes) if changes else (faults or Faults())
        with self._lock:
            was_refusing = self._faults.refuse
            self._faults = new
            self._since_set = {"connections": 0, "requests": 0}
            self._random = random.Random(new.seed)
        if new.refuse and not was_refusing:  # the host is gone: no new connections, open ones reset
            self._close_listener()
            with self._lock:
                conns = list(self._open)
            for conn in conns:
                _reset(conn)
        elif not new.refuse and was_refusing:
            self._open_listener()

    def stop(self) -> None:
        self._stopped.set()
        self._close_listener()
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()

    def __enter__(self) -> ProxyHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- listener ---------------------------------------------------------------------------
    def _open_listener(self) -> None:
        family = socket.AF_INET6 if ":" in self.listen_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.listen_host, self.port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._accept_thread = threading.Thread(target=self._accept_loop, args=(sock,), daemon=True,
                                               name=f"lab-proxy-{self.port}")
        self._accept_thread.start()

    def _close_listener(self) -> None:
        sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # listener closed (refuse or stop)
            _no_delay(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- decisions --------------------------------------------------------------------------
    def _connection_fault(self) -> str | None:
        with self._lock:
            f = self._faults
            self.stats.connections += 1
            self._since_set["connections"] += 1
            n = self._since_set["connections"]
            if f.hang:
                self.stats.hangs += 1
                return "hang"
            reset = (n <= f.reset_first or (f.reset_every > 0 and (n - f.reset_first) % f.reset_every == 0)
                     or (f.reset_probability > 0 and self._random.random() < f.reset_probability))
            if reset:
                self.stats.resets += 1
                return "reset"
        return None

    def _http_fault(self) -> Faults | None:
        with self._lock:
            f = self._faults
            self.stats.requests += 1
            self._since_set["requests"] += 1
            n = self._since_set["requests"]
            if f.http_status is None:
                return None
            hit = (n <= f.http_first or (f.http_every > 0 and (n - f.http_first) % f.http_every == 0)
                   or (f.http_probability > 0 and self._random.random() < f.http_probability))
            if hit:
                self.stats.injected[f.http_status] = self.stats.injected.get(f.http_status, 0) + 1
                return f
        return None

    # -- serving ----------------------------------------------------------------------------
    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            self._open.add(conn)
        try:
            fault = self._connection_fault()
            if fault == "reset":
                _reset(conn)
                return
            if fault == "hang":
                self._stopped.wait()
                return
            if self._faults.latency:
                time.sleep(self._faults.latency)
            if self._tls is None:
                self._splice(conn)
            else:
                self._terminate(conn)
        except (OSError, ValueError, http.client.HTTPException):
            pass  # the client or the proxy dropped the connection; nothing to report
        finally:
            with self._lock:
                self._open.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _splice(self, client: socket.socket) -> None:
        upstream = socket.create_connection((self.target_host, self.target_port), timeout=30)
        _no_delay(upstream)
        upstream.settimeout(None)
        with self._lock:
            self._open.add(upstream)
        back = threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True)
        back.start()
        try:
            self._pump(client, upstream, True)
            back.join()
        finally:
            with self._lock:
                self._open.discard(upstream)
            with contextlib.suppress(OSError):
                upstream.close()

    def _pump(self, src: socket.socket, dst: socket.socket, delay: bool) -> None:
        latency = self._faults.latency if delay else 0.0
        if not latency:
            pipe(src, dst)
            return
        # Each chunk goes on `latency` after it arrived, in order: a link's delay, not a queue of
        # delays (a request's headers and body, written one after the other, arrive together).
        delayed = _Delayed()
        sender = threading.Thread(target=pipe, args=(delayed, dst), daemon=True)
        sender.start()
        try:
            while data := src.recv(65536):
                delayed.chunks.put((time.monotonic() + latency, data))
        except OSError:
            pass
        finally:
            delayed.chunks.put((0.0, b""))  # the end
            sender.join()

    # -- HTTPS-terminating mode ---------------------------------------------------------------
    def _make_server_context(self, tls: TerminatingTLS) -> ssl.SSLContext:
        issued = tls.ca.issue("fleetplan-lab-proxy", server=True, dns_names=("localhost",),
                              ips=(self.listen_host,))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.set_alpn_protocols(["http/1.1"])  # never h2: requests are parsed as HTTP/1.1
        with tempfile.TemporaryDirectory(prefix="fleetplan-proxy-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            issued.write(cert, key)
            ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def _upstream(self, with_cert: bool) -> http.client.HTTPSConnection:
        assert self._tls is not None
        ctx = ssl.create_default_context(cafile=self._tls.upstream_ca)
        ctx.set_alpn_protocols(["http/1.1"])
        if with_cert and self._tls.client_cert is not None:
            ctx.load_cert_chain(*self._tls.client_cert)
        return http.client.HTTPSConnection(self.target_host, self.target_port, context=ctx, timeout=120)

    def _terminate(self, raw: socket.socket) -> None:
        assert self._server_ctx is not None
        conn = self._server_ctx.wrap_socket(raw, server_side=True)
        reader = conn.makefile("rb")
        upstreams: dict[bool, http.client.HTTPSConnection] = {}
        try:
            while True:
                request = _read_request(reader)
                if request is None:
                    return
                method, target, headers, body = request
                if self._faults.latency:
                    time.sleep(self._faults.latency)
                injected = self._http_fault()
                if injected is not None:
                    _send_status(conn, injected)
                    continue
                with_cert = not any(k.lower() == "authorization" for k, _ in headers)
                if with_cert not in upstreams:
                    upstreams[with_cert] = self._upstream(with_cert)
                try:
                    self._forward(conn, upstreams[with_cert], method, target, headers, body)
                except (http.client.HTTPException, OSError):
                    # The upstream exchange broke mid-way: drop that connection, and this one, as a
                    # real load balancer would (the client sees a dropped connection and retries).
                    upstreams.pop(with_cert).close()
                    return
        finally:
            for up in upstreams.values():
                up.close()
            reader.close()  # the file object holds a reference: close it first, then the socket
            with contextlib.suppress(OSError):
                conn.close()

    def _forward(self, conn: ssl.SSLSocket, upstream: http.client.HTTPSConnection, method: str, target: str,
                 headers: list[tuple[str, str]], body: bytes) -> None:
        # http.client reopens the upstream connection by itself when the server closed it.
        upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                upstream.putheader(name, value)
        if body or method in ("POST", "PUT", "PATCH"):
            upstream.putheader("Content-Length", str(len(body)))
        upstream.endheaders(body or None)
        resp = upstream.getresponse()
        lines = [f"HTTP/1.1 {resp.status} {resp.reason}"]
        lines += [f"{k}: {v}" for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
        lines.append("Transfer-Encoding: chunked")
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        while chunk := resp.read1(65536):
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        resp.close()  # marks the exchange finished, so the upstream connection can be reused
        conn.sendall(b"0\r\n\r\n")


def _read_request(reader: Any) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
    line = reader.readline(_MAX_HEAD)
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        return None
    headers: list[tuple[str, str]] = []
    while True:
        raw = reader.readline(_MAX_HEAD)
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    lowered = {k.lower(): v for k, v in headers}
    if lowered.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(reader.readline(_MAX_HEAD).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                reader.readline(_MAX_HEAD)
                break
            body += reader.read(size)
            reader.readline(_MAX_HEAD)
    else:
        body = reader.read(int(lowered.get("content-length", "0") or 0))
    return parts[0], parts[1], headers, body


def _send_status(conn: ssl.SSLSocket, faults: Faults) -> None:
    status = faults.http_status or 503
    reason = http.client.responses.get(status, "Injected")
    payload = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                          "reason": "TooManyRequests" if status == 429 else "InternalError",
                          "message": f"injected by the fleetplan lab proxy ({status})"}).encode()
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(payload)}"]
    if faults.retry_after is not None:
        head.append(f"Retry-After: {faults.retry_after}")
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)


class _Delayed:
    """A `recv` that returns what the relay put in, each chunk not before its due time."""

    def __init__(self) -> None:
        self.chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def recv(self, size: int, /) -> bytes:
        due, data = self.chunks.get()
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return data


def _no_delay(sock: socket.socket) -> None:
    """Forward small writes at once: with Nagle's algorithm on a relay, the second of two small
    writes (a request's headers, then its body) waits for the peer's delayed ACK, adding ~40 ms
    that neither end would see on a direct connection."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def start(target_host: str, target_port: int, listen_host: str = "127.0.0.1", latency: float = 0.0,
          faults: Faults | None = None, tls: TerminatingTLS | None = None, port: int = 0) -> ProxyHandle:
    """Start a proxy to target_host:target_port on listen_host (a free port unless `port` is given)."""
    _require_loopback(listen_host, "listen address")
    _require_loopback(target_host, "target address")
    chosen = faults if faults is not None else Faults()
    if latency and not chosen.latency:
        chosen = replace(chosen, latency=latency)
    handle = ProxyHandle(target_host, target_port, listen_host, port, chosen, tls)
    if not chosen.refuse:
        handle._open_listener()
    else:  # reserve a port so the handle has one to reopen on
        with socket.socket() as probe:
            probe.bind((listen_host, port))
            handle.port = probe.getsockname()[1]
    return handle


def write_proxied_kubeconfig(source: str | Path, context: str | None, server: str, dest: str | Path,
                             token: str | None = None) -> Path:
    """Copy `source` with the cluster of `context` (default: current) pointing at `server`.

    With `token`, that context's user is replaced by the bearer token (for terminating mode with a
    non-admin identity). Written 0600: the copy holds the same keys as the source.
    """
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    config = yaml.load(Path(source).read_text())
    ctx_name = context or config.get("current-context")
    ctx = next((c for c in config.get("contexts") or [] if c.get("name") == ctx_name), None)
    if ctx is None:
        raise LabError(f"context {ctx_name!r} is not in {source}")
    cluster_name = ctx["context"]["cluster"]
    for entry in config.get("clusters") or []:
        if entry.get("name") == cluster_name:
            entry["cluster"]["server"] = server
    if token is not None:
        user_name = ctx["context"]["user"]
        for entry in config.get("users") or []:
            if entry.get("name") == user_name:
                entry["user"] = {"token": token}
    config["current-context"] = ctx_name
    out = Path(dest)
    write_private(out, (json.dumps(config, indent=2) + "\n").encode())
    return out
