"""What the semantic checks need from a kubeconfig file, read as plain YAML.

Only names and server URLs are kept: contexts, the cluster each context uses, its server, and
the current-context. Credentials are never copied out of the file, and messages never quote its
contents. Connecting (exec plugins, TLS, CA pins) is the `live` package's business; this module
only answers "does this file have that context, and which server does it point at".
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fleetplan.config.reading import read_yaml_file
from fleetplan.errors import ConfigError


@dataclass(frozen=True)
class KubeconfigSummary:
    """Context name -> server URL (None when its cluster entry is missing), and the current-context."""

    file: Path
    servers: dict[str, str | None]
    current_context: str | None

    def server_of(self, context: str | None) -> str | None:
        return self.servers.get(context or self.current_context or "")


def _named(entries: Any, inner: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(entries, list):
        return out
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            body = entry.get(inner)
            out[entry["name"]] = body if isinstance(body, dict) else {}
    return out


def read_kubeconfig(file: Path) -> KubeconfigSummary:
    """Summarise `file`; raises ConfigError (located in the kubeconfig) if it is not one."""
    doc = read_yaml_file(file, what="kubeconfig")
    data = doc.data
    if data.get("kind", "Config") != "Config" or not isinstance(data.get("contexts", []), list):
        raise ConfigError(f"{file}: not a kubeconfig (expected kind: Config with a contexts list)",
                          hint="point kubeconfig at a file written by kubectl or your cloud CLI")
    clusters = _named(data.get("clusters"), "cluster")
    servers: dict[str, str | None] = {}
    for name, ctx in _named(data.get("contexts"), "context").items():
        cluster = clusters.get(str(ctx.get("cluster", "")))
        server = cluster.get("server") if cluster else None
        servers[name] = server if isinstance(server, str) else None
    current = data.get("current-context")
    return KubeconfigSummary(file, servers, current if isinstance(current, str) and current else None)


def is_loopback_url(url: str) -> bool:
    """True for https://localhost..., 127.0.0.0/8, ::1 and 0.0.0.0: unreachable from another host."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified
