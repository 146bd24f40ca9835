"""Plumbing of the OCM SIMULATIONS (`lab.simulators.ocm`): verified HTTPS requests with the
credentials a kubeconfig carries, condition helpers, and the polling loop.

`CredentialRest` never makes an unverified connection: a kubeconfig without a CA is refused, as the
real agent would fail. Conditions written here always say "simulation" in their message.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml import YAML

from fleetplan.lab.rest import ApiError, LabRest

Log = Callable[[str], None]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_condition(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": f"simulation: {message}",
        "lastTransitionTime": now(),
    }


def with_condition(obj: dict[str, Any], condition: dict[str, Any]) -> list[dict[str, Any]]:
    kept = [
        c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != condition["type"]
    ]
    return [*kept, condition]


class CredentialRest(LabRest):
    """JSON requests to a server named in a kubeconfig, with its CA as PEM and a bearer token or a
    client certificate; never without TLS verification."""

    def __init__(
        self,
        server: str,
        ca_pem: str,
        *,
        token: str | None = None,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
        timeout: float = 15.0,
    ) -> None:
        url = urlsplit(server)
        self.host, self.port, self.timeout = url.hostname or "", url.port or 443, timeout
        self.server, self.ca_pem = server, ca_pem
        self._ctx = ssl.create_default_context(cadata=ca_pem)
        self._token = token
        if cert_pem is not None and key_pem is not None:
            with tempfile.TemporaryDirectory() as tmp:  # ssl loads key pairs from files only
                cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
                cert.write_bytes(cert_pem)
                key.touch(mode=0o600)
                key.write_bytes(key_pem)
                self._ctx.load_cert_chain(str(cert), str(key))

    def request(
        self, method: str, path: str, body: object | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self._ctx, timeout=self.timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    @classmethod
    def from_kubeconfig(cls, text: str) -> CredentialRest:
        config = YAML(typ="safe").load(text) or {}
        context_name = config.get("current-context")
        context: dict[str, Any] = next(
            (c["context"] for c in config.get("contexts") or [] if c.get("name") == context_name), {}
        )
        cluster: dict[str, Any] = next(
            (c["cluster"] for c in config.get("clusters") or [] if c.get("name") == context.get("cluster")),
            {},
        )
        user: dict[str, Any] = next(
            (u["user"] for u in config.get("users") or [] if u.get("name") == context.get("user")), {}
        )
        ca = cluster.get("certificate-authority-data")
        if not ca or cluster.get("insecure-skip-tls-verify"):
            raise ValueError("the bootstrap kubeconfig carries no CA; refusing an unverified connection")
        return cls(cluster["server"], base64.b64decode(ca).decode(), token=user.get("token"))


def merge_patch(api: LabRest, path: str, body: dict[str, Any]) -> Any:
    status, data = api.request("PATCH", path, body, content_type="application/merge-patch+json")
    if status >= 300:
        raise ApiError(status, "PATCH", path, data.decode("utf-8", "replace"))
    return json.loads(data) if data else None


def run_loop(step: Callable[[], None], stop: threading.Event, interval: float, log: Log) -> None:
    last = ""
    while not stop.is_set():
        try:
            step()
            last = ""
        except (OSError, http.client.HTTPException, ApiError, ValueError, KeyError) as err:
            message = f"{type(err).__name__}: {err}"[:300]
            if message != last:  # report a persisting problem once, not every interval
                log(f"retrying after {message}")
                last = message
        stop.wait(interval)
