"""Antrea join bundles: the file that lets a member join a leader its team cannot administer.

Two formats are read and written. `antrea` is Antrea's own, so one file serves both a member-only
fleet (`leader.joinConfig`) and `antctl mc join --config-file`:

    ---
    apiVersion: multicluster.antrea.io/v1alpha1
    kind: ClusterSetJoinConfig
    clusterSetID: demo-set
    clusterID: east                  # the member this bundle was made for
    namespace: kube-system           # the member's namespace
    leaderClusterID: north
    leaderNamespace: antrea-multicluster
    leaderAPIServer: https://north.example:6443
    tokenSecretName: member-east-token   # input only: a Secret that already exists in the member
    tokenSecretFile: ./token.yaml        # input only: a Secret manifest beside this file
    ---
    apiVersion: v1                   # the token Secret itself (what `export` writes)
    kind: Secret
    metadata: {name: member-east-token}
    type: Opaque
    data: {ca.crt: ..., namespace: ..., token: ...}

`fleetplan` is the single-document `fleetplan.dev/v1alpha1` `JoinConfig` that `config.joining`
documents (stack, clusterSet, leader{name, apiServer, namespace, caData}, member, token).

Parsing and rendering are pure apart from reading the file the fleet names; the token value is
held only in memory (`JoinConfig.token` is excluded from `repr`); files are written 0600.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fleetplan.errors import ConfigError

JOIN_API_VERSION = "multicluster.antrea.io/v1alpha1"
JOIN_KIND = "ClusterSetJoinConfig"
OWN_API_VERSION = "fleetplan.dev/v1alpha1"
OWN_KIND = "JoinConfig"
FORMATS = ("antrea", "fleetplan")
_REQUIRED = ("clusterSetID", "leaderClusterID", "leaderNamespace", "leaderAPIServer")


@dataclass(frozen=True)
class JoinConfig:
    """What a member needs to join: where the leader is, and (optionally) its token Secret."""

    cluster_set_id: str
    leader_cluster_id: str
    leader_namespace: str
    leader_api_server: str
    cluster_id: str | None = None
    namespace: str | None = None
    token_secret_name: str | None = None
    # The token Secret's decoded values; `token` is a credential and never shown.
    token: str | None = field(default=None, repr=False)
    ca_crt: str | None = field(default=None, repr=False)

    @property
    def has_token(self) -> bool:
        return bool(self.token)


def read_join_config(path: Path) -> JoinConfig:
    """Parse a join file (ours or antctl's); raises ConfigError naming the file and field."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read join config {path}: {err.strerror or err}",
                          hint="write it with `fleetplan join-config export --member NAME -o FILE` "
                               "on the leader's side") from None
    docs = _load_all(text, path)
    own = next((d for d in docs if (d.get("apiVersion"), d.get("kind")) == (OWN_API_VERSION, OWN_KIND)),
               None)
    if own is not None:
        return _from_own(own, path)
    head = next((d for d in docs if d.get("kind") == JOIN_KIND), None)
    if head is None or head.get("apiVersion") != JOIN_API_VERSION:
        raise ConfigError(f"{path}: no {JOIN_KIND} document with apiVersion {JOIN_API_VERSION}",
                          hint="the first document must be the join config")
    missing = [k for k in _REQUIRED if not isinstance(head.get(k), str) or not head.get(k)]
    if missing:
        raise ConfigError(f"{path}: {JOIN_KIND} lacks {', '.join(missing)}",
                          hint="export the file again from the leader's fleet")
    secret = next((d for d in docs if d.get("kind") == "Secret"), None)
    secret_file = head.get("tokenSecretFile")
    if secret is None and isinstance(secret_file, str) and secret_file:
        secret_path = (path.parent / secret_file).resolve()
        secret = next((d for d in _load_all(_read(secret_path), secret_path)
                       if d.get("kind") == "Secret"), None)
    token = ca_crt = None
    secret_name = head.get("tokenSecretName") or None
    if secret is not None:
        data = secret.get("data") or {}
        token = _decode(data.get("token"), path, "token")
        ca_crt = _decode(data.get("ca.crt"), path, "ca.crt")
        secret_name = secret_name or (secret.get("metadata") or {}).get("name")
    return JoinConfig(
        cluster_set_id=head["clusterSetID"], leader_cluster_id=head["leaderClusterID"],
        leader_namespace=head["leaderNamespace"], leader_api_server=head["leaderAPIServer"].rstrip("/"),
        cluster_id=head.get("clusterID") or None, namespace=head.get("namespace") or None,
        token_secret_name=secret_name, token=token, ca_crt=ca_crt)


def _from_own(doc: dict[str, Any], path: Path) -> JoinConfig:
    found = doc.get("leader")
    leader: dict[str, Any] = found if isinstance(found, dict) else {}
    missing = [k for k in ("name", "apiServer") if not isinstance(leader.get(k), str)]
    if missing or not isinstance(doc.get("clusterSet"), str):
        raise ConfigError(f"{path}: {OWN_KIND} lacks clusterSet or leader.{'/'.join(missing) or 'name'}",
                          hint="export the file again from the leader's fleet")
    token = doc.get("token")
    return JoinConfig(
        cluster_set_id=doc["clusterSet"], leader_cluster_id=leader["name"],
        leader_namespace=leader.get("namespace") or "antrea-multicluster",
        leader_api_server=leader["apiServer"].rstrip("/"), cluster_id=doc.get("member") or None,
        token=token if isinstance(token, str) and token else None,
        ca_crt=_decode(leader.get("caData"), path, "leader.caData"))


def render_join_config(config: JoinConfig, fmt: str = "antrea") -> str:
    """The file `join-config export` writes, in `fmt` (see the module docstring)."""
    if fmt == "fleetplan":
        return _dump([{
            "apiVersion": OWN_API_VERSION, "kind": OWN_KIND, "stack": "antrea",
            "clusterSet": config.cluster_set_id,
            "leader": {"name": config.leader_cluster_id, "apiServer": config.leader_api_server,
                       "namespace": config.leader_namespace, "caData": _b64(config.ca_crt or "")},
            "member": config.cluster_id, "token": config.token or "",
        }], explicit_start=False)
    head: dict[str, Any] = {
        "apiVersion": JOIN_API_VERSION, "kind": JOIN_KIND,
        "clusterSetID": config.cluster_set_id, "clusterID": config.cluster_id or "",
        "namespace": config.namespace or "kube-system",
        "leaderClusterID": config.leader_cluster_id, "leaderNamespace": config.leader_namespace,
        "leaderAPIServer": config.leader_api_server,
    }
    docs: list[dict[str, Any]] = [head]
    if config.token:
        docs.append({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": config.token_secret_name or f"member-{config.cluster_id}-token"},
            "data": {
                "ca.crt": _b64(config.ca_crt or ""),
                "namespace": _b64(config.leader_namespace),
                "token": _b64(config.token),
            },
        })
    return _dump(docs, explicit_start=True)


def _dump(docs: list[dict[str, Any]], *, explicit_start: bool) -> str:
    out = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.explicit_start = explicit_start
    yaml.dump_all(docs, out)
    return out.getvalue()


def write_private_file(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 from the first byte (never world-readable, even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    # O_EXCL: never write into a file someone else created (with wider permissions) at this name.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read token Secret file {path}: {err.strerror or err}") from None


def _load_all(text: str, path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(YAML(typ="safe", pure=True).load_all(io.StringIO(text)))
    except YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}".replace("\n", " ")) from None
    return [d for d in docs if isinstance(d, dict)]


def _decode(value: object, path: Path, key: str) -> str | None:
    if value is None:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ConfigError(f"{path}: Secret data.{key} is not base64",
                          hint="export the file again from the leader's fleet") from None


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
