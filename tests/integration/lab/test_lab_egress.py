"""The egress proxy alone (no lab needed): pod addresses land on loopback twins, nothing else passes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from fleetplan.lab.egress import translate


def test_translate_maps_pod_addresses_onto_loopback_twins_only():
    import ipaddress

    pods, loop = ipaddress.IPv4Network("10.7.0.0/16"), ipaddress.IPv4Network("127.7.0.0/16")
    assert translate("10.7.0.1", pods, loop) == "127.7.0.1"
    assert translate("10.7.255.254", pods, loop) == "127.7.255.254"
    assert translate("10.8.0.1", pods, loop) is None
    assert translate("8.8.8.8", pods, loop) is None
    assert translate("not-an-ip", pods, loop) is None


def _connect(sock_path, target):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(sock_path)
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(1)
        if not chunk:
            break
        head += chunk
    return conn, head.split(b"\r\n", 1)[0].decode()


@pytest.fixture
def proxy(tmp_path):
    sock_path = str(tmp_path / "egress.sock")
    proc = subprocess.Popen([sys.executable, "-m", "fleetplan.lab.egress", f"--socket={sock_path}",
                             "--map=10.213.0.0/16=127.213.0.0/16"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not (tmp_path / "egress.sock").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the egress proxy did not start"
        time.sleep(0.05)
    yield sock_path
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def test_proxy_splices_connect_to_the_loopback_twin_and_refuses_others(proxy):
    with socket.socket() as listener:
        listener.bind(("127.213.0.5", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def echo_once():
            peer, _ = listener.accept()
            with peer:
                peer.sendall(b"echo:" + peer.recv(100))

        threading.Thread(target=echo_once, daemon=True).start()
        conn, status = _connect(proxy, f"10.213.0.5:{port}")
        with conn:
            assert status.startswith("HTTP/1.1 200")
            conn.sendall(b"ping")
            assert conn.recv(100) == b"echo:ping"

    conn, status = _connect(proxy, "93.184.216.34:443")
    conn.close()
    assert status.startswith("HTTP/1.1 403")
    conn, status = _connect(proxy, f"10.213.0.6:{port}")  # nothing listens on that twin
    conn.close()
    assert status.startswith("HTTP/1.1 503")
