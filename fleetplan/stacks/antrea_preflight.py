"""Preflight checks of an Antrea fleet: the traps `antctl mc` leaves users to discover at runtime.

- Cluster IDs must be DNS-1123 labels, and `member-announce-from-<id>` a valid DNS-1123
  subdomain (upstream enforces both since the per-member token change).
- No two IDs may form a dash-prefix pair (`east` and `east-1`): upstream refuses them, because
  name-prefix matching on announce and token names would let one member pass as the other.
- The leader's API server must not be a loopback address when some member is remote: the
  address is copied into every member's ClusterSet and a remote member would dial itself.
- `tokens.strategy: shared` is an explicit opt-in, and always warned about.
- The Antrea agent's `Multicluster` feature gate (`antrea-config` ConfigMap): a warning when it is
  off, from `multicluster_gate_warning`, which the live layer calls with the ConfigMap it read.

Everything here is pure except `kubeconfig_server`, which reads the kubeconfig file the fleet
names. Diagnostics carry the field path as their address; severity is "error" or "warning".
"""

from __future__ import annotations

import io
import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from fleetplan.config.models import Fleet
from fleetplan.errors import ConfigError, Diagnostic
from fleetplan.stacks.joinconfigs import JoinConfig

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ANNOUNCE_PREFIX = "member-announce-from-"
SHARED_WARNING = (
    "tokens.strategy is 'shared': every member authenticates to the leader with one token, so any "
    "member (or anyone holding its copy) can announce itself as any other cluster ID and hijack "
    "that cluster's exports (the ClusterID spoofing Antrea fixed by making tokens per cluster ID). "
    "Antrea leaders that check the cluster-id annotation reject a shared token outright. Use "
    "strategy: per-member unless every member is run by the same team and the leader is older.")


def kubeconfig_server(path: Path, context: str | None) -> str | None:
    """The server URL of `context` (default: current-context) in the kubeconfig at `path`."""
    try:
        config = YAML(typ="safe", pure=True).load(io.StringIO(path.read_text()))
    except (OSError, YAMLError) as err:
        raise ConfigError(f"cannot read kubeconfig {path}: {err}".replace("\n", " "),
                          hint="set spec.leader.apiServer or fix the kubeconfig path") from None
    if not isinstance(config, dict):
        return None
    wanted = context or config.get("current-context")
    ctx = next((c.get("context") or {} for c in config.get("contexts") or []
                if isinstance(c, dict) and c.get("name") == wanted), None)
    if ctx is None:
        return None
    cluster = next((c.get("cluster") or {} for c in config.get("clusters") or []
                    if isinstance(c, dict) and c.get("name") == ctx.get("cluster")), None)
    server = (cluster or {}).get("server")
    return server if isinstance(server, str) else None


def is_loopback(server: str) -> bool:
    host = urlsplit(server).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def preflight(fleet: Fleet, leader_server: str, join: JoinConfig | None) -> list[Diagnostic]:
    """Every finding about `fleet`, errors and warnings, in field order."""
    spec = fleet.spec
    found: list[Diagnostic] = []
    ids: list[tuple[str, str]] = []
    leader_id = join.leader_cluster_id if join else fleet.leader_name
    ids.append(("spec.leader.name", leader_id))
    ids += [(f"spec.members[{i}].name", m.name) for i, m in enumerate(spec.members)]
    ids += [(f"spec.antrea.joinMembers[{i}]", name) for i, name in enumerate(spec.antrea.join_members)]
    for path, cluster_id in ids:
        found += _id_problems(path, cluster_id)
    found += dash_prefix_problems(ids)
    seen: dict[str, str] = {}
    for path, cluster_id in ids:
        if cluster_id in seen:
            found.append(Diagnostic(f"cluster ID {cluster_id!r} is used twice (also at {seen[cluster_id]})",
                                    address=path, hint="every cluster needs its own ID"))
        seen.setdefault(cluster_id, path)
    found += _loopback_problems(fleet, leader_server)
    if spec.tokens.strategy == "shared" and spec.members:
        found.append(Diagnostic(SHARED_WARNING, address="spec.tokens.strategy", severity="warning"))
    if join is not None:
        found += _join_problems(fleet, join)
        if spec.antrea.join_members:
            found.append(Diagnostic("a member-only fleet cannot hand out join files",
                                    address="spec.antrea.joinMembers",
                                    hint="list join members in the leader's fleet"))
    return found


def _id_problems(path: str, cluster_id: str) -> list[Diagnostic]:
    if not _DNS_LABEL.match(cluster_id) or len(cluster_id) > 63:
        return [Diagnostic(f"cluster ID {cluster_id!r} is not a DNS-1123 label", address=path,
                           hint="lower-case letters, digits and '-', at most 63 characters")]
    announce = ANNOUNCE_PREFIX + cluster_id
    if len(announce) > 253 or not _DNS_SUBDOMAIN.match(announce):
        return [Diagnostic(f"{announce!r} is not a valid DNS-1123 subdomain", address=path,
                           hint="use a shorter cluster ID")]
    return []


def dash_prefix_problems(ids: list[tuple[str, str]]) -> list[Diagnostic]:
    """IDs where one is another plus '-suffix' (`east`, `east-1`), which upstream refuses."""
    out = []
    for path, longer in ids:
        for _, shorter in ids:
            if longer.startswith(shorter + "-"):
                out.append(Diagnostic(
                    f"cluster IDs {shorter!r} and {longer!r} form a dash-prefix pair, which Antrea "
                    "refuses (one member's names would be a prefix of the other's)", address=path,
                    hint=f"rename {longer!r} so it does not start with {shorter + '-'!r}"))
    return out


def _loopback_problems(fleet: Fleet, leader_server: str) -> list[Diagnostic]:
    found = []
    if is_loopback(leader_server) and fleet.spec.antrea.join_members:
        # Where another team's member runs is unknown here; the join file would carry this address.
        found.append(Diagnostic(
            f"the leader's API server {leader_server} is a loopback address; join files exported for "
            f"{', '.join(fleet.spec.antrea.join_members)} will only work on this machine",
            address="spec.leader.apiServer", severity="warning",
            hint="set spec.leader.apiServer to an address the members can reach"))
    return found + _remote_member_problems(fleet, leader_server)


def _remote_member_problems(fleet: Fleet, leader_server: str) -> list[Diagnostic]:
    if not is_loopback(leader_server) or not fleet.spec.members:
        return []
    remote = []
    for index, ref in enumerate(c for c in fleet.clusters() if c.role == "member"):
        server = ref.api_server
        if server is None:
            try:
                server = kubeconfig_server(ref.kubeconfig, ref.context)
            except ConfigError:
                server = None
        if server is None or not is_loopback(server):
            remote.append((index, ref.name))
    if not remote:
        return []
    names = ", ".join(name for _, name in remote)
    return [Diagnostic(
        f"the leader's API server {leader_server} is a loopback address, but member(s) {names} are "
        "not on this machine and would dial themselves", address="spec.leader.apiServer",
        hint="set spec.leader.apiServer to an address the members can reach, e.g. "
             "https://north.example:6443")]


def _join_problems(fleet: Fleet, join: JoinConfig) -> list[Diagnostic]:
    out = []
    members = fleet.spec.members
    if join.has_token and fleet.spec.tokens.strategy != "shared" and len(members) > 1:
        out.append(Diagnostic(
            f"a join bundle carries one member's token, but this fleet has {len(members)} members",
            address="spec.members", hint="write one member-only fleet per join bundle"))
    if join.cluster_id and members and any(m.name != join.cluster_id for m in members):
        out.append(Diagnostic(
            f"the join bundle was made for cluster {join.cluster_id!r}",
            address="spec.members[0].name",
            hint=f"name the member {join.cluster_id!r} (the leader's token is bound to that ID)"))
    if fleet.spec.leader.name and fleet.spec.leader.name != join.leader_cluster_id:
        out.append(Diagnostic(
            f"spec.leader.name is {fleet.spec.leader.name!r} but the join bundle's leader is "
            f"{join.leader_cluster_id!r}", address="spec.leader.name",
            hint="remove spec.leader.name; a member-only fleet takes it from the join bundle"))
    return out


def multicluster_gate_warning(cluster: str, config_map: Mapping[str, Any] | None) -> Diagnostic | None:
    """A warning when the `antrea-config` ConfigMap shows the agent's Multicluster gate off.

    Nothing is said when the ConfigMap is absent (Antrea may be configured another way)."""
    if not config_map:
        return None
    conf = ((config_map.get("data") or {}).get("antrea-agent.conf")) or ""
    try:
        agent = YAML(typ="safe", pure=True).load(io.StringIO(conf)) or {}
    except YAMLError:
        return None
    gates = agent.get("featureGates") if isinstance(agent, dict) else None
    enabled = isinstance(gates, dict) and gates.get("Multicluster") is True
    if enabled:
        return None
    return Diagnostic(
        "antrea-agent's Multicluster feature gate is off (antrea-config, antrea-agent.conf), so the "
        "member will join but no multi-cluster traffic will flow",
        address=f"{cluster}/kube-system/antrea-config",
        hint="set featureGates.Multicluster: true and multicluster.enableGateway: true in "
             "antrea-agent.conf, then restart antrea-agent", severity="warning")
