"""The API server's egress proxy: "cluster" traffic to pod addresses lands on their loopback twins.

Why it exists: the API server dials a Service-backed webhook or APIService at the address in the
Service's EndpointSlice (with `--enable-aggregator-routing=true`). EndpointSlice validation refuses
loopback addresses, so kwok gives cluster i's pods addresses in 10.i.0.0/16, which no interface
carries. The API server's egress selector sends every "cluster" connection through this HTTP
CONNECT proxy on a unix socket; the proxy rewrites 10.i.a.b:port to 127.i.a.b:port, which any
process on this machine can bind without privileges, and splices the bytes. TLS stays end to end
(the API server still verifies the webhook's certificate for `<svc>.<ns>.svc`).

Only addresses inside the mapped network are proxied; anything else is answered 403, so the lab
never reaches outside the machine. Each CONNECT is logged (one line) for diagnosis.

Run: python -m fleetplan.lab.egress --socket PATH --map 10.1.0.0/16=127.1.0.0/16
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from typing import Protocol

_MAX_HEADER = 16 * 1024


def translate(address: str, source: ipaddress.IPv4Network, target: ipaddress.IPv4Network) -> str | None:
    """The loopback twin of a pod address, or None when it is outside the mapped network."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    if ip not in source:
        return None
    return str(target.network_address + (int(ip) - int(source.network_address)))


class Readable(Protocol):
    def recv(self, size: int, /) -> bytes: ...


def pipe(src: Readable, dst: socket.socket) -> None:
    """Copy `src` to `dst` until `src` ends (or either fails), then end `dst`'s sending side."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _ConnectHandler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def handle(self) -> None:
        conn: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk or len(head) > _MAX_HEADER:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3 or parts[0] != "CONNECT" or ":" not in parts[1]:
            self._answer(conn, "405 Method Not Allowed", line)
            return
        host, _, port = parts[1].rpartition(":")
        twin = translate(host.strip("[]"), self.server.source, self.server.target)
        if twin is None or not port.isdigit():
            self._answer(conn, "403 Forbidden", f"{parts[1]} is not a lab pod address")
            return
        try:
            upstream = socket.create_connection((twin, int(port)), timeout=10)
        except OSError as err:
            self._answer(conn, "503 Service Unavailable", f"{parts[1]} -> {twin}:{port}: {err}")
            return
        upstream.settimeout(None)
        self.server.log(f"CONNECT {parts[1]} -> {twin}:{port}")
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        back = threading.Thread(target=pipe, args=(upstream, conn), daemon=True)
        back.start()
        pipe(conn, upstream)
        back.join()
        upstream.close()

    def _answer(self, conn: socket.socket, status: str, why: str) -> None:
        self.server.log(f"refused ({status}): {why}")
        with contextlib.suppress(OSError):
            conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())


class _ProxyServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, source: ipaddress.IPv4Network, target: ipaddress.IPv4Network) -> None:
        self.source, self.target = source, target
        super().__init__(path, _ConnectHandler)

    def log(self, message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleetplan.lab.egress", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="unix socket path to listen on")
    parser.add_argument("--map", required=True, help="SOURCE_CIDR=TARGET_CIDR, e.g. 10.1.0.0/16=127.1.0.0/16")
    args = parser.parse_args(argv)
    src, _, dst = args.map.partition("=")
    source, target = ipaddress.IPv4Network(src), ipaddress.IPv4Network(dst)
    if source.prefixlen != target.prefixlen:
        parser.error("both networks of --map need the same prefix length")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)
    server = _ProxyServer(args.socket, source, target)
    os.chmod(args.socket, 0o600)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    server.log(f"egress proxy on {args.socket}: {source} -> {target}")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
