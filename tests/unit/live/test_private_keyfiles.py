"""Credential files the kubernetes client writes stay private and do not outlive their process.

Each case runs fleetplan in a child process with its own TMPDIR, loads a kubeconfig that embeds a
CA, a client certificate and a client key (generated here), and looks at what is on disk."""

from __future__ import annotations

import base64
import datetime
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parents[3]

_LOAD = """
import json, os, signal, sys
os.umask(0)  # the most careless umask: privacy must not depend on it
from fleetplan.live.kubeconfigs import ClusterAccess, new_api_client
cfg = new_api_client(ClusterAccess("c1", sys.argv[1])).configuration
print(json.dumps({"ca": cfg.ssl_ca_cert, "cert": cfg.cert_file, "key": cfg.key_file}), flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[2] == "wait":
    sys.stdin.readline()
"""


def _pem_pair(name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(hours=1)).sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture
def kubeconfig(tmp_path: Path) -> tuple[Path, bytes]:
    ca, _ = _pem_pair("test-ca")
    cert, key = _pem_pair("admin")
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c1",
        "clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.1:1",
                                                "certificate-authority-data": b64(ca)}}],
        "users": [{"name": "u", "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": "c1", "context": {"cluster": "c1", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path, key


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _env(tmpdir: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}


def _load(kubeconfig: Path, tmpdir: Path, then: str) -> tuple[int, dict[str, str]]:
    done = subprocess.run([sys.executable, "-c", _LOAD, str(kubeconfig), then], capture_output=True, text=True,
                          env=_env(tmpdir), timeout=60)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_killed_process_leaves_its_keys_only_in_a_private_dir_that_the_next_start_sweeps(
        tmp_path: Path, kubeconfig: tuple[Path, bytes]) -> None:
    path, key = kubeconfig
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    parent = tmpdir / f"fleetplan-{os.getuid()}"

    code, files = _load(path, tmpdir, "kill")
    assert code == -signal.SIGKILL
    key_file = Path(files["key"])
    assert key_file.read_bytes() == key  # the crash really left the key behind ...
    assert key_file.parent.parent == parent  # ... but only inside the private directory
    assert {Path(f).parent for f in files.values()} == {key_file.parent}
    assert [p.name for p in tmpdir.iterdir()] == [parent.name]
    for secret in files.values():
        assert _mode(secret) == 0o600
    assert _mode(key_file.parent) == _mode(parent) == 0o700

    code, again = _load(path, tmpdir, "exit")
    assert code == 0
    assert not key_file.parent.exists(), "the next process's start-up sweep removes the dead one's keys"
    assert not Path(again["key"]).parent.exists(), "a process removes its own directory at exit"
    assert list(parent.iterdir()) == []


def test_a_running_process_keeps_its_keys(tmp_path: Path, kubeconfig: tuple[Path, bytes]) -> None:
    path, _ = kubeconfig
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    waiting = subprocess.Popen([sys.executable, "-c", _LOAD, str(path), "wait"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=_env(tmpdir))
    try:
        assert waiting.stdout is not None
        held = json.loads(waiting.stdout.readline())
        assert _load(path, tmpdir, "exit")[0] == 0
        assert Path(held["key"]).is_file(), "a live process's directory must not be swept"
    finally:
        waiting.communicate("\n", timeout=30)
    assert not Path(held["key"]).parent.exists()


def test_a_parent_dir_that_is_a_symlink_is_refused(tmp_path: Path, kubeconfig: tuple[Path, bytes]) -> None:
    path, _ = kubeconfig
    tmpdir = tmp_path / "tmp"
    elsewhere = tmp_path / "elsewhere"
    tmpdir.mkdir()
    elsewhere.mkdir()
    (tmpdir / f"fleetplan-{os.getuid()}").symlink_to(elsewhere)
    done = subprocess.run([sys.executable, "-c", _LOAD, str(path), "exit"], capture_output=True, text=True,
                          env=_env(tmpdir), timeout=60)
    assert done.returncode != 0
    assert "refusing to keep kubeconfig credentials there" in done.stderr
    assert list(elsewhere.iterdir()) == []
