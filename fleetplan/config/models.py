"""The fleet.yaml v1alpha1 models: the only pydantic models in fleetplan.

Attributes are snake_case; fleet.yaml keys are their camelCase aliases and nothing else (a
snake_case key in the file is an unknown key). Every model is frozen and forbids extra keys.
Defaults are stated in each field's description, which is also what `fleetplan schema` publishes.
Durations stay strings as written and are exposed in seconds (`tokens.ttl_seconds`); paths are
absolute after loading (see `values.py`). Cross-field rules that need the whole fleet (unique
names, selectors that name real clusters, kubeconfigs that exist) live in `checking.py`, so that
they are reported all at once with positions rather than one at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from fleetplan.config.durations import parse_duration
from fleetplan.config.values import ApiServer, DnsLabel, Duration, ResolvedPath, Sha256, Version

API_VERSION = "fleetplan.dev/v1alpha1"
KIND = "Fleet"
STACKS = ("antrea", "ocm")
# Manifest bundles each stack applies; the keys `spec.manifests.sha256` may pin.
BUNDLES: dict[str, tuple[str, ...]] = {"antrea": ("leader", "member"), "ocm": ("hub", "spoke")}
SELECTOR_WORDS = ("all", "leader", "members")


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel,
                              validate_by_name=False, validate_by_alias=True, serialize_by_alias=True)


def _check_selector(value: Any) -> Any:
    if isinstance(value, str):
        if value not in SELECTOR_WORDS:
            raise PydanticCustomError("fleet_value", f"{value!r} is not a cluster selector",
                                      {"hint": "use all, leader, members, or a list of cluster names"})
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PydanticCustomError("fleet_value", "expected all, leader, members or a non-empty list of "
                              "cluster names", {"hint": "for example clusters: [west, east]"})


ClusterSelector = Annotated[
    str | tuple[str, ...], BeforeValidator(_check_selector),
    WithJsonSchema({"anyOf": [{"enum": list(SELECTOR_WORDS)},
                              {"type": "array", "items": {"type": "string"}, "minItems": 1}]})]


class Metadata(Model):
    name: DnsLabel = Field(description="Fleet name, a DNS-1123 label. Also the value of the ownership "
                           "label on every object fleetplan creates. Required.")


class Manifests(Model):
    mirror: ResolvedPath | None = Field(None, description="A directory laid out <stack>/<version>/... "
                                        "for offline or air-gapped use. Default: the stack's release "
                                        "location for spec.version.")
    sha256: dict[str, Sha256] = Field(default_factory=dict, description="Optional pins per bundle "
                                      "(antrea: leader, member; ocm: hub, spoke), checked before "
                                      "anything is applied. Default: no pins.")


class ClusterSet(Model):
    name: DnsLabel = Field(description="Antrea ClusterSet ID / OCM ManagedClusterSet name. Required.")
    namespace: DnsLabel = Field("antrea-multicluster", description="Antrea leader namespace. Default "
                                "antrea-multicluster. Not used by ocm (ManagedClusterSets are "
                                "cluster-scoped).")


_KUBECONFIG_DOC = ("Kubeconfig file. Default: the first path in $KUBECONFIG, then ~/.kube/config. "
                   "Exec plugins work.")
_CONTEXT_DOC = "Context in the kubeconfig. Default: its current-context."
_CA_DOC = "Optional pin of the API server's CA certificate, checked on every connection."


class SecretKeyRef(Model):
    name: DnsLabel = Field(description="Name of a Secret in the Fleet resource's namespace. Required.")
    key: str = Field("kubeconfig", description="Key in the Secret's data holding the kubeconfig. "
                     "Default kubeconfig.")


_KUBECONFIG_SECRET_DOC = ("Controller mode (`fleetplan controller`): the Secret holding this "
                          "cluster's kubeconfig; it is written to a private temporary file for each "
                          "reconcile and replaces `kubeconfig`. The CLI does not read it. Default: unset.")


class Leader(Model):
    name: DnsLabel | None = Field(None, description="Cluster ID of the leader (the OCM hub). Required "
                                  "unless joinConfig is set, where it defaults to the join file's.")
    kubeconfig: ResolvedPath | None = Field(None, description=_KUBECONFIG_DOC)
    context: str | None = Field(None, description=_CONTEXT_DOC)
    api_server: ApiServer | None = Field(None, description="How members reach the leader. Default: "
                                         "the server of the leader's kubeconfig context.")
    ca_sha256: Sha256 | None = Field(None, description=_CA_DOC)
    join_config: ResolvedPath | None = Field(None, description="Member-only fleet: a join bundle from "
                                             "`fleetplan join-config export` or an Antrea "
                                             "ClusterSetJoinConfig. fleetplan then needs no "
                                             "credentials for the leader. Default: unset.")
    kubeconfig_secret: SecretKeyRef | None = Field(None, description=_KUBECONFIG_SECRET_DOC)


class Member(Model):
    name: DnsLabel = Field(description="Cluster ID of the member (the OCM managed cluster name). Required.")
    kubeconfig: ResolvedPath | None = Field(None, description=_KUBECONFIG_DOC)
    context: str | None = Field(None, description=_CONTEXT_DOC)
    api_server: ApiServer | None = Field(None, description="The member's own API server URL (OCM "
                                         "externalServerURLs). Default: from its kubeconfig.")
    ca_sha256: Sha256 | None = Field(None, description=_CA_DOC)
    labels: dict[str, str] = Field(default_factory=dict, description="Labels (OCM cluster labels). "
                                   "Default: none.")
    kubeconfig_secret: SecretKeyRef | None = Field(None, description=_KUBECONFIG_SECRET_DOC)


class Tokens(Model):
    strategy: Literal["per-member", "shared"] = Field("per-member", description="per-member (default): "
                                                      "one token per member. shared: one for all, "
                                                      "explicit opt-in, warned: members can spoof "
                                                      "each other.")
    kind: Literal["bound", "secret"] = Field("bound", description="bound (default): TokenRequest tokens "
                                             "with ttl. secret: long-lived service account token Secrets.")
    ttl: Duration = Field("24h", description="Lifetime of bound tokens. Default 24h.")
    rotate_before: Duration = Field("6h", description="Plan a rotation when a token is this close to "
                                    "expiry. Default 6h; must be less than ttl.")

    @property
    def ttl_seconds(self) -> int:
        return parse_duration(self.ttl)

    @property
    def rotate_before_seconds(self) -> int:
        return parse_duration(self.rotate_before)


class Wait(Model):
    timeout: Duration = Field("5m", description="How long to wait for readiness. Default 5m.")

    @property
    def timeout_seconds(self) -> int:
        return parse_duration(self.timeout)


class Lifecycle(Model):
    prevent_destroy: tuple[str, ...] = Field((), description="Clusters `destroy` must refuse to tear "
                                             "down: cluster names, or leader / members. Default: none.")


class ResourceSet(Model):
    clusters: ClusterSelector = Field(description="all | leader | members | a list of cluster names. "
                                      "Required.")
    path: ResolvedPath = Field(description="A manifest file or a directory of *.yaml files. Required.")


class State(Model):
    backend: Literal["local", "kubernetes"] = Field("local", description="local (default): a file. "
                                                    "kubernetes: a Secret plus a Lease lock.")
    path: ResolvedPath | None = Field(None, description="local: the state file. Default "
                                      "state/<metadata.name>.json beside the fleet file.")
    cluster: str | None = Field(None, description="kubernetes: the cluster holding the state. "
                                "Default: the leader.")
    namespace: DnsLabel | None = Field(None, description="kubernetes: namespace of the Secret and "
                                       "Lease. Default fleetplan-system.")
    secret_name: DnsLabel | None = Field(None, description="kubernetes: Secret (and Lease) name. "
                                         "Default fleetplan-state-<metadata.name>.")
    kubeconfig: ResolvedPath | None = Field(None, description="kubernetes: kubeconfig of a cluster "
                                            "outside the fleet that holds the state (e.g. a management "
                                            "cluster shared by CI runners); takes precedence over "
                                            "cluster. Default: unset.")
    context: str | None = Field(None, description="kubernetes: context in state.kubeconfig. Default: "
                                "its current-context.")
    lease_duration: Duration = Field("30s", description="kubernetes: how long the lock Lease holds "
                                     "without renewal. The holder renews it every third of this; "
                                     "a holder that dies loses the lock this long after its last "
                                     "renewal. Default 30s.")

    @property
    def lease_duration_seconds(self) -> int:
        return parse_duration(self.lease_duration)


class AntreaImages(Model):
    leader: str | None = Field(None, description="Image for the leader's antrea-mc-controller. "
                               "Default: the bundle's.")
    member: str | None = Field(None, description="Image for the members' antrea-mc-controller. "
                               "Default: the bundle's.")


class AntreaOptions(Model):
    member_namespace: DnsLabel = Field("kube-system", description="Namespace of the member controller, "
                                       "its token Secret and ClusterSet. Default kube-system.")
    images: AntreaImages = Field(default_factory=AntreaImages, description="Image overrides. Default: none.")
    join_members: tuple[DnsLabel, ...] = Field((), description="Members run by other teams: the leader "
                                               "gets their ServiceAccount, RoleBinding (and, with "
                                               "tokens.kind secret, token Secret), and `fleetplan "
                                               "join-config export --member NAME` hands out their join "
                                               "file. fleetplan connects to none of them. Default: none.")


class ClusterManagerOptions(Model):
    feature_gates: dict[str, StrictBool] = Field(default_factory=dict, description="ClusterManager "
                                                 "registration feature gates, name: true|false. "
                                                 "Default: none.")


class KlusterletOptions(Model):
    mode: Literal["Default", "Singleton"] = Field("Default", description="Klusterlet deploy mode. "
                                                  "Default Default.")


class BootstrapToken(Model):
    kind: Literal["bound", "secret"] = Field("bound", description="bound (default): a ServiceAccount token minted "
                                             "with ttl at apply time. secret: a bootstrap.kubernetes.io/token "
                                             "Secret in kube-system that expires after ttl.")
    ttl: Duration = Field("1h", description="Lifetime of the bootstrap token (either kind). Default 1h.")

    @property
    def ttl_seconds(self) -> int:
        return parse_duration(self.ttl)


class OcmOptions(Model):
    cluster_manager: ClusterManagerOptions = Field(default_factory=ClusterManagerOptions,
                                                   description="ClusterManager settings.")
    auto_approve_users: tuple[str, ...] = Field((), description="Users whose CSRs the hub approves "
                                                "automatically. Default: none.")
    klusterlet: KlusterletOptions = Field(default_factory=KlusterletOptions,
                                          description="Klusterlet settings.")
    bootstrap_token: BootstrapToken = Field(default_factory=BootstrapToken, description="The spokes' "
                                            "bootstrap token.")
    managed_cluster_set_bindings: tuple[DnsLabel, ...] = Field((), description="Namespaces that get a "
                                                               "ManagedClusterSetBinding to the set. "
                                                               "Default: none.")


class FleetSpec(Model):
    stack: Literal["antrea", "ocm", "none"] = Field(description="antrea | ocm | none (no multi-cluster "
                                                    "system: only spec.resources). Required.")
    # version and clusterSet are required for antrea and ocm (checking.py says so with a position);
    # the empty defaults only let a `stack: none` fleet omit them.
    version: Version = Field(default_factory=str, description="Stack release, e.g. v2.7.0; selects the "
                             "manifest bundle. Required for antrea and ocm; not used by none.")
    manifests: Manifests = Field(default_factory=Manifests, description="Where manifests come from.")
    cluster_set: ClusterSet = Field(default_factory=lambda: ClusterSet.model_construct(name=""),
                                    description="The cluster set. Required for antrea and ocm; not "
                                    "used by none.")
    leader: Leader = Field(description="The leader (OCM: the hub). Required.")
    members: tuple[Member, ...] = Field((), description="Member clusters (OCM: spokes). Default: none "
                                        "(a leader-only fleet).")
    tokens: Tokens = Field(default_factory=Tokens, description="Member tokens.")
    wait: Wait = Field(default_factory=Wait, description="Readiness waits.")
    lifecycle: Lifecycle = Field(default_factory=Lifecycle, description="Destroy protection.")
    resources: tuple[ResourceSet, ...] = Field((), description="Extra manifests for selected clusters. "
                                               "Default: none.")
    state: State = Field(default_factory=State, description="Where state is kept.")
    antrea: AntreaOptions = Field(default_factory=AntreaOptions, description="Antrea-only options.")
    ocm: OcmOptions = Field(default_factory=OcmOptions, description="OCM-only options.")


@dataclass(frozen=True)
class ClusterRef:
    """A cluster fleetplan connects to, with its kubeconfig default applied."""

    name: str
    role: Literal["leader", "member"]
    kubeconfig: Path
    context: str | None  # None: the kubeconfig's current-context
    api_server: str | None
    ca_sha256: str | None
    labels: dict[str, str] = field(default_factory=dict)


def default_kubeconfig() -> Path:
    """$KUBECONFIG's first entry, else ~/.kube/config (what kubectl reads first)."""
    first = next((p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p), None)
    return Path(os.path.abspath(os.path.expanduser(first or "~/.kube/config")))


class Fleet(Model):
    """A whole fleet.yaml document."""

    model_config = ConfigDict(title="Fleet", json_schema_extra={"$id": "https://fleetplan.dev/schemas/fleet.schema.json"})

    api_version: Literal["fleetplan.dev/v1alpha1"] = Field(description="Always fleetplan.dev/v1alpha1.")
    kind: Literal["Fleet"] = Field(description="Always Fleet.")
    metadata: Metadata = Field(description="Names the fleet. Required.")
    spec: FleetSpec = Field(description="The fleet's shape. Required.")

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def leader_name(self) -> str:
        """The leader's cluster ID (from the join file when the fleet only names a joinConfig)."""
        if self.spec.leader.name is None:
            raise ValueError("leader name unknown: load the fleet with load_fleet()")
        return self.spec.leader.name

    @property
    def is_member_only(self) -> bool:
        return self.spec.leader.join_config is not None

    def clusters(self) -> tuple[ClusterRef, ...]:
        """Every cluster fleetplan connects to, leader first, then members in file order.

        A member-only fleet's leader (given by joinConfig) is not listed: fleetplan holds no
        credentials for it. A missing kubeconfig is the default one, read at call time.
        """
        refs = []
        lead = self.spec.leader
        if lead.join_config is None:
            refs.append(ClusterRef(self.leader_name, "leader", lead.kubeconfig or default_kubeconfig(),
                                   lead.context, lead.api_server, lead.ca_sha256))
        for m in self.spec.members:
            refs.append(ClusterRef(m.name, "member", m.kubeconfig or default_kubeconfig(), m.context,
                                   m.api_server, m.ca_sha256, dict(m.labels)))
        return tuple(refs)

    def cluster_names(self) -> tuple[str, ...]:
        """Leader (when named) then members."""
        lead = (self.spec.leader.name,) if self.spec.leader.name else ()
        return lead + tuple(m.name for m in self.spec.members)

    def state_path(self, fleet_dir: Path) -> Path:
        """The local state file: spec.state.path, else state/<name>.json under `fleet_dir`."""
        return self.spec.state.path or (fleet_dir / "state" / f"{self.name}.json")
