"""Join files: what a member-only fleet knows about a leader it holds no credentials for.

The format is Antrea's `ClusterSetJoinConfig` (as `antctl mc get joinconfig` and
`fleetplan join-config export` write it), optionally followed in the same file by exactly one more
document, the member's token Secret (`v1`, `Secret`, type Opaque), or naming a Secret manifest
beside it with `tokenSecretFile`. Any other document is an error located in the file:

    apiVersion: multicluster.antrea.io/v1alpha1
    kind: ClusterSetJoinConfig
    clusterSetID: demo-set
    clusterID: east                  # optional: the member this file is for
    namespace: kube-system           # optional: the member's namespace
    leaderClusterID: north
    leaderNamespace: antrea-multicluster
    leaderAPIServer: https://north.example:6443
    tokenSecretName: member-east-token   # optional
    tokenSecretFile: ./token.yaml        # optional
    ---
    apiVersion: v1                   # optional: the token Secret (data: ca.crt, namespace, token)
    kind: Secret

fleetplan's own single-document form is accepted too:

    apiVersion: fleetplan.dev/v1alpha1
    kind: JoinConfig
    stack: antrea
    clusterSet: demo-set
    leader: {name: north, apiServer: https://north.example:6443, namespace: antrea-multicluster,
             caData: <base64 PEM>}
    member: east
    token: <bearer token>

This module validates the file with positions for `fleetplan validate`; the Antrea stack reads
the token itself (fleetplan/stacks/joinconfigs.py). No token value is kept here: only whether
one is present.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError

from fleetplan.config.explaining import explain_validation_error
from fleetplan.config.models import Model
from fleetplan.config.positions import Positions
from fleetplan.config.reading import YamlDocument, read_yaml_documents
from fleetplan.config.values import ApiServer, DnsLabel
from fleetplan.errors import ConfigError, Diagnostic

JOIN_API_VERSION = "multicluster.antrea.io/v1alpha1"
JOIN_KIND = "ClusterSetJoinConfig"


class JoinConfigFile(Model):
    """Antrea's ClusterSetJoinConfig."""

    api_version: Literal["multicluster.antrea.io/v1alpha1"]
    kind: Literal["ClusterSetJoinConfig"]
    cluster_set_id: DnsLabel = Field(alias="clusterSetID")
    leader_cluster_id: DnsLabel = Field(alias="leaderClusterID")
    leader_namespace: DnsLabel = Field(alias="leaderNamespace")
    leader_api_server: ApiServer = Field(alias="leaderAPIServer")
    cluster_id: str | None = Field(None, alias="clusterID")
    namespace: str | None = None
    token_secret_name: str | None = Field(None, alias="tokenSecretName")
    token_secret_file: str | None = Field(None, alias="tokenSecretFile")


class OwnJoinLeader(Model):
    name: DnsLabel
    api_server: ApiServer
    namespace: DnsLabel = "antrea-multicluster"
    ca_data: str | None = None


class OwnJoinConfigFile(Model):
    """fleetplan's single-document join file."""

    api_version: Literal["fleetplan.dev/v1alpha1"]
    kind: Literal["JoinConfig"]
    stack: Literal["antrea"]
    cluster_set: DnsLabel
    leader: OwnJoinLeader
    member: DnsLabel | None = None
    token: SecretStr | None = None


@dataclass(frozen=True)
class JoinBundle:
    """The non-secret facts of a join file."""

    file: Path
    cluster_set: str
    leader_name: str
    leader_api_server: str
    leader_namespace: str
    member: str | None
    member_namespace: str | None
    has_token: bool


def _problem(doc: YamlDocument, path: tuple[str, ...], summary: str, hint: str) -> ConfigError:
    return ConfigError([Diagnostic(summary, Positions(str(doc.file), doc.tree).value(path), hint=hint)])


def _check_secret(doc: YamlDocument) -> bool:
    """True when the Secret carries a base64 token; raises on a malformed one."""
    data = doc.data.get("data")
    if not isinstance(data, dict):
        raise _problem(doc, ("data",), "the token Secret has no data mapping", "export the file again")
    for key in ("token", "ca.crt"):
        value = data.get(key)
        if value is None:
            continue
        try:
            base64.b64decode(str(value), validate=True)
        except binascii.Error:
            raise _problem(doc, ("data", key), f"Secret data.{key} is not base64",
                           "export the file again from the leader's fleet") from None
    return data.get("token") is not None


def load_join_config(file: Path) -> JoinBundle:
    """Validate a join file; raises ConfigError located in it (or in its token Secret file)."""
    docs = read_yaml_documents(file, what="join file")
    own = next((d for d in docs if d.data.get("kind") == "JoinConfig"), None)
    if own is not None:
        if len(docs) > 1:
            extra = next(d for d in docs if d is not own)
            raise _problem(extra, _first_key(extra), "a fleetplan JoinConfig file holds exactly one document",
                           "remove the other documents; the token is the JoinConfig's `token` field")
        return _load_own(own)
    head = docs[0]
    _check_documents(docs)
    try:
        join = JoinConfigFile.model_validate(head.data)
    except ValidationError as err:
        positions = Positions(str(file), head.tree)
        raise ConfigError(explain_validation_error(JoinConfigFile, err, positions)) from None
    if join.cluster_id:
        try:
            JoinConfigFile.model_validate({**head.data, "clusterSetID": join.cluster_id})
        except ValidationError:
            raise _problem(head, ("clusterID",), f"clusterID {join.cluster_id!r} is not a DNS-1123 label",
                           "use the member's cluster name") from None
    secrets = [d for d in docs if d.data.get("kind") == "Secret"]
    if not secrets and join.token_secret_file:
        secret_file = (file.parent / join.token_secret_file).resolve()
        secrets = [d for d in read_yaml_documents(secret_file, what="token Secret file")
                   if d.data.get("kind") == "Secret"]
        if not secrets:
            raise _problem(head, ("tokenSecretFile",), f"{str(secret_file)!r} holds no Secret",
                           "point tokenSecretFile at the member token Secret manifest")
    has_token = any([_check_secret(s) for s in secrets])
    return JoinBundle(file=file, cluster_set=join.cluster_set_id, leader_name=join.leader_cluster_id,
                      leader_api_server=join.leader_api_server, leader_namespace=join.leader_namespace,
                      member=join.cluster_id or None, member_namespace=join.namespace or None,
                      has_token=has_token)


def _first_key(doc: YamlDocument) -> tuple[str, ...]:
    """Where a document starts (a later document's root has no position of its own)."""
    return tuple(str(k) for k in list(doc.data)[:1])


def _check_documents(docs: list[YamlDocument]) -> None:
    """Antrea's layout exactly: the ClusterSetJoinConfig, then optionally the token Secret."""
    if docs[0].data.get("kind") != JOIN_KIND and any(d.data.get("kind") == JOIN_KIND for d in docs):
        raise _problem(docs[0], _first_key(docs[0]), f"the first document must be the {JOIN_KIND}",
                       "put the join config first and the token Secret after it, as antctl writes them")
    if len(docs) > 2:
        raise _problem(docs[2], _first_key(docs[2]), f"a join file holds the {JOIN_KIND} and at most one token Secret; "
                       f"found {len(docs)} documents", "remove the extra documents")
    if len(docs) == 2:
        secret = docs[1]
        for key, want in (("apiVersion", "v1"), ("kind", "Secret")):
            if secret.data.get(key) != want:
                raise _problem(secret, (key,) if key in secret.data else _first_key(secret),
                               f"the second document must be the member's token Secret ({key}: {want})",
                               "export the file again from the leader's fleet")
        if secret.data.get("type", "Opaque") != "Opaque":
            raise _problem(secret, ("type",), "the token Secret must be of type Opaque (what the member "
                           "controller reads)", "write type: Opaque")


def _load_own(doc: YamlDocument) -> JoinBundle:
    try:
        own = OwnJoinConfigFile.model_validate(doc.data)
    except ValidationError as err:
        positions = Positions(str(doc.file), doc.tree)
        raise ConfigError(explain_validation_error(OwnJoinConfigFile, err, positions)) from None
    if own.leader.ca_data:
        try:
            base64.b64decode(own.leader.ca_data, validate=True)
        except binascii.Error:
            raise _problem(doc, ("leader", "caData"), "leader.caData is not base64",
                           "export the file again from the leader's fleet") from None
    return JoinBundle(file=doc.file, cluster_set=own.cluster_set, leader_name=own.leader.name,
                      leader_api_server=own.leader.api_server, leader_namespace=own.leader.namespace,
                      member=own.member, member_namespace=None,
                      has_token=own.token is not None and bool(own.token.get_secret_value()))
