"""A guard that keeps the test process's traffic on this machine.

`install()` wraps `socket.socket.connect`, `connect_ex` and `sendto`, and `socket.create_connection`,
so a connection to anything but loopback (127.0.0.0/8, ::1, the unspecified address, which Linux
routes to the local host) or a unix socket raises `OffMachineConnectionError` before a packet is
sent. A host *name* other than `localhost` is refused too: resolving it to find out where it points
would already be a query off the machine, and the lab only ever uses literal loopback addresses.

The error is a `PermissionError` (an `OSError`), so code under test handles it like any unreachable
address and never turns it into a traceback; every refusal is also recorded in `REFUSED`, and
tests/conftest.py fails the test during which one happened, so the attempt cannot go unnoticed.

`strip_proxies(env)` removes the proxy variables (any case) that would send a client's HTTP
through a proxy host instead of straight to a loopback API server; tests/conftest.py applies it to
the session's own environment, which every subprocess a test spawns inherits.

Invariant: installing twice is a no-op; `uninstall()` restores the originals (the guard's own
tests use it to leave the session as they found it).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

PROXY_VARS = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy", "socks_proxy",
                        "grpc_proxy", "rsync_proxy"})
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
REFUSED: list[str] = []
_LOCK = threading.Lock()
_ORIGINALS: dict[str, Callable[..., Any]] = {}


class OffMachineConnectionError(PermissionError):
    """A test tried to reach an address that is not on this machine."""


def is_local(address: Any) -> bool:
    """True for a unix socket path, a loopback or unspecified IP, or `localhost`."""
    if isinstance(address, (str, bytes, bytearray)):  # AF_UNIX path (or abstract name)
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    host = host.strip("[]").split("%", 1)[0].rstrip(".").lower()  # IPv6 scope ids and FQDN dots
    if host in LOCAL_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: refused, since resolving it is itself traffic off the machine
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def strip_proxies(env: MutableMapping[str, str]) -> list[str]:
    """Remove every proxy variable from `env`, whatever its case; returns the names removed."""
    removed = [name for name in env if name.lower() in PROXY_VARS]
    for name in removed:
        del env[name]
    return removed


def _refuse(what: str, address: Any) -> OffMachineConnectionError:
    message = f"{what} to {address!r} refused: tests may only reach loopback addresses or unix sockets"
    with _LOCK:
        REFUSED.append(message)
    return OffMachineConnectionError(message)


def _family_is_unix(sock: socket.socket) -> bool:
    return hasattr(socket, "AF_UNIX") and sock.family == socket.AF_UNIX


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not (_family_is_unix(self) or is_local(address)):
        raise _refuse("connect", address)
    _ORIGINALS["connect"](self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not (_family_is_unix(self) or is_local(address)):
        raise _refuse("connect_ex", address)
    result: int = _ORIGINALS["connect_ex"](self, address)
    return result


def _guarded_sendto(self: socket.socket, data: Any, *rest: Any) -> int:
    address = rest[-1] if rest else None  # sendto(data, address) or sendto(data, flags, address)
    if address is not None and not (_family_is_unix(self) or is_local(address)):
        raise _refuse("sendto", address)
    sent: int = _ORIGINALS["sendto"](self, data, *rest)
    return sent


def _guarded_create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
    # Checked before create_connection's own getaddrinfo, so no name is even looked up.
    if not is_local(address):
        raise _refuse("create_connection", address)
    made: socket.socket = _ORIGINALS["create_connection"](address, *args, **kwargs)
    return made


def install() -> None:
    """Put the guard in place. The wrappers call the originals through `_ORIGINALS` at call time, so
    the guard's own tests can swap in a recorder and never send a packet even if the guard broke."""
    if _ORIGINALS:
        return
    _ORIGINALS.update(connect=socket.socket.connect, connect_ex=socket.socket.connect_ex,
                      sendto=socket.socket.sendto, create_connection=socket.create_connection)
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign,assignment]
    socket.socket.sendto = _guarded_sendto  # type: ignore[assignment]
    socket.create_connection = _guarded_create_connection


def uninstall() -> None:
    if not _ORIGINALS:
        return
    socket.socket.connect = _ORIGINALS["connect"]  # type: ignore[method-assign]
    socket.socket.connect_ex = _ORIGINALS["connect_ex"]  # type: ignore[method-assign]
    socket.socket.sendto = _ORIGINALS["sendto"]  # type: ignore[method-assign]
    socket.create_connection = _ORIGINALS["create_connection"]
    _ORIGINALS.clear()


def installed() -> bool:
    return bool(_ORIGINALS) and socket.socket.connect is _guarded_connect
