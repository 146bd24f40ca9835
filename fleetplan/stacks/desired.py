"""What a stack hands the engine: `DesiredResource`s keyed by `Address`.

The contract between stacks (pure) and the engine (graph, diff, plan, apply):

- `body` is the object as fleetplan wants it on the cluster: a plain JSON-like mapping whose
  leaves may be `Ref`s, values known only after another resource is applied (a token minted on
  the leader and written into a member's Secret). The plan shows a `Ref` as
  `(known after apply)`, or `(sensitive, known after apply)` when `sensitive`.
- `handler` says how the engine converges it. `apply` (the default) is a server-side apply with
  field manager `fleetplan`; other handlers are operations that are not plain objects (minting a
  bound token, approving a CSR) and are implemented in `live`, selected by name.
- `depends_on` are explicit edges; the graph adds implicit ones (CRD before its CRs, Namespace
  before namespaced objects, ServiceAccount before its bindings and tokens, roles before bindings,
  and the source of every `Ref`).
- `readiness` is what apply waits for after converging the resource.
- `DesiredFleet.probes` are objects planning reads (never writes) for a stack's preflight
  warnings, which the plan shows with `DesiredFleet.diagnostics`.
- `sensitive_paths` are dotted paths in `body` (e.g. `data.token`) whose values are never shown,
  stored or logged; only a hash of them is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fleetplan.addrs import Address
from fleetplan.errors import Diagnostic


@dataclass(frozen=True)
class Ref:
    """A value known only after `source` is applied: its output named `output`."""

    source: Address
    output: str
    sensitive: bool = True
    transform: str | None = None  # e.g. "base64" when the value lands in Secret.data


@dataclass(frozen=True)
class Template:
    """A string built at apply time from literal text and `Ref`s (e.g. a kubeconfig that embeds a
    token and a CA minted on another cluster). `text` holds `${name}` placeholders, one per entry
    of `refs`; the engine substitutes each Ref's resolved value (after the Ref's own `transform`),
    then applies `transform` to the whole string. Shown like a Ref: `(sensitive, known after apply)`."""

    text: str
    refs: tuple[tuple[str, Ref], ...]
    transform: str | None = None  # e.g. "base64" when the string lands in Secret.data
    sensitive: bool = True

    def render(self, values: Mapping[str, str]) -> str:
        """`text` with every placeholder replaced by `values[name]` (already resolved)."""
        out = self.text
        for name, _ in self.refs:
            out = out.replace("${" + name + "}", values[name])
        return out


class Handler(str, Enum):
    APPLY = "apply"  # server-side apply of `body`
    BOUND_TOKEN = "bound-token"  # TokenRequest for a ServiceAccount; outputs: token, expiry, ca.crt
    SECRET_TOKEN = "secret-token"  # kubernetes.io/service-account-token Secret; outputs: token, ca.crt
    # A bootstrap.kubernetes.io/token Secret with an expiration, minted at apply time (registered by
    # the OCM stack's handlers); outputs: token, expiry, ca.crt.
    BOOTSTRAP_TOKEN = "bootstrap-token"
    ACCEPT_CLUSTER = "accept-cluster"  # OCM: approve the cluster's CSRs, set hubAcceptsClient
    WAIT = "wait"  # nothing to write; readiness only (e.g. wait for a peer's condition)
    # OCM: nothing to do on create; on delete, remove the cluster's CSRs, ManagedCluster and hub
    # namespace. Spoke resources depend on it so that it is deleted after the spoke is unjoined.
    RELEASE_CLUSTER = "release-cluster"
    # Antrea (fleetplan/live/antrea_handlers.py): the leader ClusterSet, whose deletion refuses while
    # MemberClusterAnnounces remain (unless forced), and member tokens, whose removal first waits
    # (bounded) for the member to leave. Otherwise like `apply`, `bound-token` and `secret-token`.
    ANTREA_LEADER_CLUSTERSET = "antrea-leader-clusterset"
    ANTREA_MEMBER_BOUND_TOKEN = "antrea-member-bound-token"
    ANTREA_MEMBER_SECRET_TOKEN = "antrea-member-secret-token"


class ReadinessKind(str, Enum):
    NONE = "none"
    ESTABLISHED = "established"  # CRD condition Established=True
    AVAILABLE = "available"  # Deployment: availableReplicas >= replicas
    CONDITION = "condition"  # status.conditions[type=condition_type].status == condition_status
    EXISTS = "exists"  # the object exists (e.g. a ManagedCluster created by an agent)
    WEBHOOK = "webhook"  # the admission webhooks of this configuration answer


@dataclass(frozen=True)
class Readiness:
    kind: ReadinessKind = ReadinessKind.NONE
    condition_type: str | None = None
    condition_status: str = "True"
    timeout_seconds: float | None = None  # None: the fleet's wait.timeout
    description: str = ""  # the progress line: "ClusterSet demo-set Ready on west"


@dataclass(frozen=True)
class DesiredResource:
    address: Address
    body: Mapping[str, Any]
    handler: Handler = Handler.APPLY
    depends_on: frozenset[Address] = frozenset()
    readiness: Readiness = field(default_factory=Readiness)
    sensitive_paths: frozenset[str] = frozenset()
    # Fields the diff ignores even though fleetplan sets them (e.g. values another controller owns).
    ignore_paths: frozenset[str] = frozenset()
    # Options for non-apply handlers (ttl seconds, rotate-before seconds, audiences, ...).
    options: Mapping[str, Any] = field(default_factory=dict)
    # Whether destroy may delete it (lifecycle.preventDestroy marks the leader's resources).
    prevent_destroy: bool = False


@dataclass(frozen=True)
class Probe:
    """An object planning reads but never changes, so a stack can warn about what it finds there
    (e.g. Antrea's agent config on a member). `judge` is pure: it gets the object, or None when it
    is absent or unreadable, and returns a warning or None."""

    cluster: str
    api_version: str
    kind: str
    namespace: str
    name: str
    judge: Callable[[Mapping[str, Any] | None], Diagnostic | None]


@dataclass(frozen=True)
class DesiredFleet:
    """Everything a stack wants, plus the facts the engine needs about the clusters."""

    fleet_name: str
    resources: tuple[DesiredResource, ...]
    warnings: tuple[str, ...] = ()
    # Preflight findings with their field path (shown with the plan), and live checks to run.
    diagnostics: tuple[Diagnostic, ...] = ()
    probes: tuple[Probe, ...] = ()

    def by_address(self) -> dict[Address, DesiredResource]:
        return {r.address: r for r in self.resources}
