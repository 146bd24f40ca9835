"""The session's network guard (kit.netguard, installed by tests/conftest.py) and its offline
environment. Off-machine attempts here never reach the real socket calls: the originals the guard
delegates to are swapped for a recorder first, so a broken guard fails these tests instead of
sending a packet."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from kit import netguard

ROOT = Path(__file__).resolve().parents[2]
OFF_MACHINE = ("192.0.2.10", 443)  # TEST-NET-1: documentation only, and never actually dialled here


@pytest.fixture
def reached(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Replaces the real connect/connect_ex/sendto/create_connection behind the guard with recorders."""
    assert netguard.installed(), "tests/conftest.py did not install the guard"
    calls: list[Any] = []
    for name in ("connect", "connect_ex", "sendto", "create_connection"):
        monkeypatch.setitem(netguard._ORIGINALS, name, lambda *args, _n=name, **_kw: calls.append((_n, args)))
    return calls


@pytest.mark.parametrize("address", [("127.0.0.1", 1), ("127.3.4.1", 80), ("::1", 1, 0, 0), ("localhost", 9),
                                     ("::ffff:127.0.0.1", 1, 0, 0), ("0.0.0.0", 1), ("[::1]", 1), "/tmp/x.sock",
                                     b"\0abstract"])
def test_loopback_and_unix_addresses_are_local(address: Any) -> None:
    assert netguard.is_local(address)


@pytest.mark.parametrize("address", [("10.0.0.1", 443), ("192.168.1.1", 80), ("8.8.8.8", 53), ("2001:db8::1", 1),
                                     ("::ffff:10.1.2.3", 1, 0, 0), ("github.com", 443), ("pypi.org.", 443),
                                     ("127.example", 1)])
def test_other_addresses_and_any_other_name_are_not(address: Any) -> None:
    assert not netguard.is_local(address)


def test_every_connect_path_to_another_host_is_refused_before_the_socket_call(reached: list[Any]) -> None:
    before = len(netguard.REFUSED)
    with socket.socket() as sock, pytest.raises(netguard.OffMachineConnectionError):
        sock.connect(OFF_MACHINE)
    with socket.socket() as sock, pytest.raises(netguard.OffMachineConnectionError):
        sock.connect_ex(OFF_MACHINE)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, pytest.raises(netguard.OffMachineConnectionError):
        sock.sendto(b"x", OFF_MACHINE)
    with pytest.raises(netguard.OffMachineConnectionError):
        socket.create_connection(("example.invalid", 80), timeout=1)
    context = ssl.create_default_context()
    with context.wrap_socket(socket.socket(), server_hostname="x") as tls, \
            pytest.raises(netguard.OffMachineConnectionError):
        tls.connect(OFF_MACHINE)  # SSLSocket connects through socket.socket.connect
    provoked = netguard.REFUSED[before:]
    del netguard.REFUSED[before:]  # provoked on purpose: the session's per-test check must not count them
    assert reached == []
    assert len(provoked) == 5
    assert "192.0.2.10" in provoked[0] and "loopback" in provoked[0]


def test_the_refusal_is_an_oserror_so_code_under_test_reports_it_like_an_unreachable_host() -> None:
    assert issubclass(netguard.OffMachineConnectionError, OSError)


def test_loopback_connections_and_unix_sockets_still_work() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        accepted: list[bytes] = []

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                accepted.append(conn.recv(5))

        worker = threading.Thread(target=serve)
        worker.start()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall(b"hello")
        worker.join(5)
    assert accepted == [b"hello"]
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"u")
        assert right.recv(1) == b"u"


def test_strip_proxies_removes_every_case_and_keeps_the_rest() -> None:
    env = {"http_proxy": "a", "HTTPS_PROXY": "b", "All_Proxy": "c", "NO_PROXY": "d", "no_proxy": "e", "PATH": "/bin",
           "PROXYISH": "kept"}
    assert sorted(netguard.strip_proxies(env)) == ["All_Proxy", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "no_proxy"]
    assert env == {"PATH": "/bin", "PROXYISH": "kept"}


def test_the_session_and_its_subprocesses_are_offline() -> None:
    assert not [k for k in os.environ if k.lower() in netguard.PROXY_VARS]
    mirror = Path(os.environ["FLEETPLAN_MIRROR"])
    assert mirror.is_absolute()
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(k for k in os.environ if 'proxy' in "
                            "k.lower())); print(os.environ['FLEETPLAN_MIRROR'])"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert child.stdout.splitlines() == ["[]", str(mirror)]


PROBE = '''
import socket
from kit import netguard

def test_swallows_an_off_machine_attempt(monkeypatch):
    assert netguard.installed(), "no guard: not dialling"
    monkeypatch.setitem(netguard._ORIGINALS, "connect", lambda *a: None)  # never dial, even if unguarded
    try:
        socket.socket().connect(("192.0.2.10", 443))
    except OSError:
        pass  # code under test that hides the error must not hide the attempt

def test_stays_local():
    socket.socket().close()
'''


def test_a_test_that_swallows_a_refusal_still_fails(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(probe)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert "connection(s) off this machine were refused during the test" in done.stdout
