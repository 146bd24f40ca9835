"""A tiny JSON client for a lab cluster's API server, over `http.client` with the admin certificate.

The lab must not depend on the Kubernetes client library (only `fleetplan.live` may import it), and
it needs only a handful of calls: health probes, creating the fake Node, reading Services and
EndpointSlices. TLS is always verified against the cluster's own CA.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetplan.errors import LabError


class ApiError(LabError):
    """The API server answered with a non-success status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status = status
        super().__init__(f"{method} {path} returned HTTP {status}: {body[:300]}")


class LabRest:
    """JSON requests to one API server; a new connection per request keeps threads independent."""

    def __init__(self, host: str, port: int, ca: Path | str, cert: Path | str | None = None,
                 key: Path | str | None = None, timeout: float = 30.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._ctx = ssl.create_default_context(cafile=str(ca))
        if cert is not None:
            self._ctx.load_cert_chain(str(cert), str(key) if key is not None else None)

    def request(self, method: str, path: str, body: object | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self._ctx, timeout=self.timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def call(self, method: str, path: str, body: object | None = None) -> Any:
        status, data = self.request(method, path, body)
        if status >= 300:
            raise ApiError(status, method, path, data.decode("utf-8", "replace"))
        return json.loads(data) if data else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def ensure(self, path: str, body: dict[str, Any]) -> None:
        """POST `body` to the collection `path`, accepting that it already exists."""
        status, data = self.request("POST", path, body)
        if status >= 300 and status != 409:
            raise ApiError(status, "POST", path, data.decode("utf-8", "replace"))

    def healthy(self, path: str = "/readyz") -> bool:
        try:
            status, _ = self.request("GET", path)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200


def wait_for(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.5,
             abort: Callable[[], str | None] | None = None) -> None:
    """Poll `check` until true; `abort` may return a reason to give up early (a process died)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException, ApiError):
            pass
        if abort is not None and (reason := abort()):
            raise LabError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
