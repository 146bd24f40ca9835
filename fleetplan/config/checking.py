"""Semantic checks: rules that need the whole fleet, the files it names, or its kubeconfigs.

Run after the models validated, so every value has its type; each rule adds diagnostics located
at the YAML position of the field it is about, and all rules run so the user sees every problem
at once. Rules (DESIGN section 1, issue 2):

- cluster names are unique and the leader is not also a member;
- antrea: no two IDs form a dash-prefix pair (`east` with `east-1`); ocm: no cluster is named
  after a namespace the hub itself uses (the hub makes one namespace per cluster);
- leader: a name, unless a joinConfig gives it; a joinConfig fleet holds no leader credentials and
  converges at least one member; the join file agrees with the fleet;
- tokens: ttl longer than rotateBefore; shared tokens are warned about;
- options of the other stack are refused; sha256 pins name real bundles; `stack: none` has
  resources and no stack settings, antrea and ocm have a version and a clusterSet;
- lifecycle, resources and state name real clusters; resource paths and the mirror exist;
- kubeconfig files exist and have the context (skipped offline);
- a loopback leader apiServer is refused when a member's server is not loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fleetplan.config.kubeconfigs import KubeconfigSummary, is_loopback_url, read_kubeconfig
from fleetplan.config.models import BUNDLES, SELECTOR_WORDS, Fleet, Leader, Member, default_kubeconfig
from fleetplan.config.positions import FieldPath, Positions
from fleetplan.errors import ConfigError, Diagnostic

if TYPE_CHECKING:  # joining builds more models; imported only for fleets that have a join file
    from fleetplan.config.joining import JoinBundle

OCM_RESERVED_NAMES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease", "open-cluster-management",
    "open-cluster-management-hub", "open-cluster-management-agent",
    "open-cluster-management-agent-addon", "open-cluster-management-global-set",
})
SPEC = ("spec",)


class _Checker:
    def __init__(self, fleet: Fleet, positions: Positions, offline: bool) -> None:
        self.fleet = fleet
        self.spec = fleet.spec
        self.positions = positions
        self.offline = offline
        self.findings: list[Diagnostic] = []
        self.kubeconfigs: dict[Path, KubeconfigSummary | ConfigError] = {}
        self.join: JoinBundle | None = None

    def error(self, path: FieldPath, summary: str, hint: str | None = None, *, key: bool = False) -> None:
        where = self.positions.key(path) if key else self.positions.value(path)
        self.findings.append(Diagnostic(summary, where, hint=hint))

    def warn(self, path: FieldPath, summary: str, hint: str | None = None) -> None:
        self.findings.append(Diagnostic(summary, self.positions.value(path), hint=hint, severity="warning"))

    def given(self, path: FieldPath) -> bool:
        return self.positions.exists(path)

    # --- names -------------------------------------------------------------------------------
    def named_clusters(self) -> list[tuple[str, FieldPath]]:
        out: list[tuple[str, FieldPath]] = []
        if self.spec.leader.name:
            out.append((self.spec.leader.name, (*SPEC, "leader", "name")))
        out += [(m.name, (*SPEC, "members", i, "name")) for i, m in enumerate(self.spec.members)]
        return out

    def check_names(self) -> None:
        seen: dict[str, FieldPath] = {}
        for name, path in self.named_clusters():
            if name in seen:
                first = self.positions.value(seen[name])
                what = "the leader" if seen[name][1] == "leader" else "another member"
                self.error(path, f"cluster name {name!r} is already used by {what} "
                           f"(line {first.line})", "every cluster needs its own name")
            else:
                seen[name] = path
        names = [(n, p) for n, p in self.named_clusters() if seen.get(n) == p]
        if self.spec.stack == "antrea":
            for name, path in names:
                for other, _ in names:
                    if other != name and other.startswith(name + "-"):
                        self.error(path, f"cluster IDs {name!r} and {other!r} form a dash-prefix pair, "
                                   "which Antrea refuses", f"rename one, e.g. {other.replace('-', '', 1)!r}")
        elif self.spec.stack == "ocm":
            for name, path in names:
                if name in OCM_RESERVED_NAMES:
                    self.error(path, f"{name!r} cannot be an OCM cluster name: the hub makes a namespace "
                               "per cluster and uses this one itself", f"for example {name + '-cluster'!r}")

    # --- leader and join file ------------------------------------------------------------------
    def check_leader(self) -> None:
        lead: Leader = self.spec.leader
        at = (*SPEC, "leader")
        if lead.join_config is None:
            if lead.name is None:
                self.error(at, "missing required field 'name'", "add 'name:' (the leader's cluster ID), "
                           "or 'joinConfig:' for a member-only fleet", key=True)
            return
        for field, alias in (("kubeconfig", "kubeconfig"), ("context", "context")):
            if getattr(lead, field) is not None:
                self.error((*at, alias), f"a leader given by joinConfig takes no {alias}",
                           "remove it: a member-only fleet holds no credentials for the leader", key=True)
        if not self.spec.members:
            self.error(at, "a member-only fleet (leader.joinConfig) needs at least one member",
                       "add spec.members, or drop joinConfig to manage the leader", key=True)
        if self.spec.stack != "antrea":
            self.error((*at, "joinConfig"), "member-only fleets (leader.joinConfig) are supported for "
                       "stack antrea only", "manage the hub and spokes in one ocm fleet", key=True)
            return
        path = lead.join_config
        if not path.is_file():
            self.error((*at, "joinConfig"), f"join file {str(path)!r} not found",
                       "write it with `fleetplan join-config export --member NAME` on the leader side")
            return
        from fleetplan.config.joining import load_join_config

        try:
            self.join = load_join_config(path)
        except ConfigError as err:
            self.findings.extend(err.diagnostics)
            return
        self.check_join_agrees(self.join)

    def check_join_agrees(self, join: JoinBundle) -> None:
        at = (*SPEC, "leader")
        if join.member_namespace and join.member_namespace != self.spec.antrea.member_namespace:
            self.warn((*at, "joinConfig"), f"the join file puts the member in namespace "
                      f"{join.member_namespace!r}, this fleet in {self.spec.antrea.member_namespace!r}",
                      "set spec.antrea.memberNamespace to match")
        if self.spec.leader.name and self.spec.leader.name != join.leader_name:
            self.error((*at, "name"), f"leader name {self.spec.leader.name!r} differs from the join "
                       f"file's {join.leader_name!r}", "remove leader.name or make them agree")
        if self.spec.cluster_set.name != join.cluster_set:
            self.error((*SPEC, "clusterSet", "name"), f"cluster set {self.spec.cluster_set.name!r} differs "
                       f"from the join file's {join.cluster_set!r}")
        members = [m.name for m in self.spec.members]
        if join.member and join.member not in members:
            self.error((*at, "joinConfig"), f"the join file is for member {join.member!r}, which this "
                       "fleet does not list", f"add a member named {join.member!r}")

    # --- tokens, stacks, pins --------------------------------------------------------------
    def check_tokens(self) -> None:
        tokens = self.spec.tokens
        at = (*SPEC, "tokens")
        if tokens.kind == "bound" and tokens.rotate_before_seconds >= tokens.ttl_seconds:
            self.error((*at, "rotateBefore"), f"rotateBefore ({tokens.rotate_before}) must be shorter "
                       f"than ttl ({tokens.ttl}), or every plan rotates every token",
                       "for example ttl: 24h with rotateBefore: 6h")
        if tokens.strategy == "shared":
            self.warn((*at, "strategy"), "shared tokens let any member act as another (ClusterID spoofing)",
                      "use strategy: per-member unless you must")
        if self.spec.stack == "ocm" and self.given(at):
            self.warn(at, "ocm does not use spec.tokens", "set spec.ocm.bootstrapToken instead")

    def check_stack_options(self) -> None:
        if self.spec.stack == "none":
            self.check_no_stack()
            return
        for key, field in (("version", self.spec.version), ("clusterSet", self.spec.cluster_set.name)):
            if not field:
                self.error(SPEC, f"missing required field '{key}'",
                           f"stack {self.spec.stack} needs spec.{key}", key=True)
        other = "ocm" if self.spec.stack == "antrea" else "antrea"
        if self.given((*SPEC, other)):
            self.error((*SPEC, other), f"{other} options in an {self.spec.stack} fleet",
                       f"remove spec.{other} or set spec.stack: {other}", key=True)
        if self.spec.stack == "ocm" and self.given((*SPEC, "clusterSet", "namespace")):
            self.warn((*SPEC, "clusterSet", "namespace"), "ocm ignores clusterSet.namespace "
                      "(ManagedClusterSets are cluster-scoped)", "remove it")
        bundles = BUNDLES[self.spec.stack]
        for name in self.spec.manifests.sha256:
            if name not in bundles:
                self.error((*SPEC, "manifests", "sha256", name),
                           f"no {self.spec.stack} bundle named {name!r}",
                           "pins are allowed for: " + ", ".join(bundles), key=True)
        mirror = self.spec.manifests.mirror
        if mirror is not None and not mirror.is_dir():
            self.error((*SPEC, "manifests", "mirror"), f"mirror directory {str(mirror)!r} not found",
                       f"lay it out as <dir>/{self.spec.stack}/{self.spec.version}/")

    def check_no_stack(self) -> None:
        """`stack: none` applies spec.resources only: stack settings would be silently ignored."""
        if not self.spec.resources:
            self.error((*SPEC, "stack"), "stack none has nothing to apply without spec.resources",
                       "add spec.resources, or choose stack antrea or ocm")
        for key in ("version", "clusterSet", "manifests", "tokens", "antrea", "ocm"):
            if self.given((*SPEC, key)):
                self.error((*SPEC, key), f"spec.{key} is not used by stack none",
                           f"remove spec.{key}, or choose stack antrea or ocm", key=True)

    # --- references to clusters --------------------------------------------------------------
    def check_references(self) -> None:
        names = {n for n, _ in self.named_clusters()}
        for i, item in enumerate(self.fleet.spec.lifecycle.prevent_destroy):
            if item not in names and item not in ("leader", "members"):
                self.error((*SPEC, "lifecycle", "preventDestroy", i), f"no cluster named {item!r}",
                           "name a cluster, or leader / members")
        for i, res in enumerate(self.spec.resources):
            at: FieldPath = (*SPEC, "resources", i)
            if isinstance(res.clusters, tuple):
                for j, name in enumerate(res.clusters):
                    if name not in names:
                        bare = name in SELECTOR_WORDS
                        hint = f"write 'clusters: {name}' without brackets" if bare else None
                        self.error((*at, "clusters", j), f"no cluster named {name!r}", hint)
            if not res.path.exists():
                self.error((*at, "path"), f"{str(res.path)!r} not found",
                           "paths are relative to the fleet file")
        state = self.spec.state
        at = (*SPEC, "state")
        if state.backend == "local":
            kube_only = (("cluster", "cluster"), ("namespace", "namespace"), ("secret_name", "secretName"))
            for field, alias in kube_only:
                if getattr(state, field) is not None:
                    self.error((*at, alias), f"{alias} applies to backend: kubernetes only", key=True)
        else:
            if state.path is not None:
                self.error((*at, "path"), "path applies to backend: local only", key=True)
            if state.cluster is not None and state.cluster not in names:
                self.error((*at, "cluster"), f"no cluster named {state.cluster!r}")

    # --- kubeconfigs (online) ---------------------------------------------------------------
    def summary(self, file: Path) -> KubeconfigSummary | ConfigError:
        if file not in self.kubeconfigs:
            try:
                self.kubeconfigs[file] = read_kubeconfig(file)
            except ConfigError as err:
                self.kubeconfigs[file] = err
        return self.kubeconfigs[file]

    def server_for(self, cluster: Leader | Member, at: FieldPath, report: bool) -> str | None:
        given = cluster.kubeconfig is not None
        file = cluster.kubeconfig or default_kubeconfig()
        if not file.is_file():
            if report:
                where = (*at, "kubeconfig") if given else at
                what = f"kubeconfig {str(file)!r} not found" if given else \
                    f"no kubeconfig given and the default {str(file)!r} does not exist"
                self.error(where, what, "set kubeconfig: (relative to the fleet file) or KUBECONFIG")
            return None
        summary = self.summary(file)
        if isinstance(summary, ConfigError):
            if report:
                self.error((*at, "kubeconfig"), f"kubeconfig {str(file)!r} is unreadable: "
                           f"{summary.diagnostics[0].summary}")
            return None
        context = cluster.context or summary.current_context
        if context is None:
            if report:
                self.error(at, f"kubeconfig {str(file)!r} has no current-context", "set context:", key=True)
            return None
        if context not in summary.servers:
            if report:
                known = ", ".join(sorted(summary.servers)[:8]) or "none"
                self.error((*at, "context") if cluster.context else at,
                           f"context {context!r} not found in {str(file)!r}", f"contexts there: {known}")
            return None
        return summary.server_of(context)

    def check_kubeconfigs_and_loopback(self) -> None:
        lead = self.spec.leader
        lead_at = (*SPEC, "leader")
        lead_server = lead.api_server
        if lead.join_config is None and not self.offline:
            found = self.server_for(lead, lead_at, report=True)
            lead_server = lead_server or found
        elif self.join is not None:
            lead_server = lead_server or self.join.leader_api_server
        for i, member in enumerate(self.spec.members):
            at = (*SPEC, "members", i)
            server = member.api_server
            if not self.offline:
                found = self.server_for(member, at, report=True)
                server = server or found
            reaches_leader = self.spec.stack != "none"  # with no stack, members never call the leader
            if reaches_leader and lead_server and server and is_loopback_url(lead_server) \
                    and not is_loopback_url(server):
                where = (*lead_at, "apiServer") if self.given((*lead_at, "apiServer")) else lead_at
                self.error(where, f"the leader's API server {lead_server} is a loopback address, but member "
                           f"{member.name!r} is at {server}, on another host",
                           "set spec.leader.apiServer to an address the members can reach")
                break


def check_semantics(fleet: Fleet, positions: Positions, *, offline: bool) -> tuple[Fleet, list[Diagnostic]]:
    """All semantic findings, and the fleet with its leader name filled from a join file."""
    checker = _Checker(fleet, positions, offline)
    checker.check_leader()
    checker.check_names()
    checker.check_tokens()
    checker.check_stack_options()
    checker.check_references()
    checker.check_kubeconfigs_and_loopback()
    if checker.join is not None and fleet.spec.leader.name is None:
        leader = fleet.spec.leader.model_copy(update={"name": checker.join.leader_name})
        fleet = fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"leader": leader})})
    findings = sorted(checker.findings, key=lambda d: (d.location.line or 0, d.location.column or 0)
                      if d.location else (0, 0))
    return fleet, findings
