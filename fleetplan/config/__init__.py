"""fleet.yaml: the models, the loader with positions, and the semantic checks.

The only pydantic zone of fleetplan. Public API (everything else here is internal):

    load_fleet(path, *, offline=False) -> Fleet
        Read, validate and check a fleet file. Raises ConfigError whose diagnostics each name
        file:line:column, the field path (spec.members[1].name), what was expected and found,
        and a hint. offline=True skips checks of kubeconfig files and contexts.
    check_fleet_file(path, *, offline=False) -> CheckedFleet
        The same, but returns the model (or None) with every error and warning found.
    Fleet                      the frozen model; fleet.yaml keys are the camelCase aliases
        fleet.name, fleet.leader_name, fleet.is_member_only
        fleet.clusters() -> tuple[ClusterRef, ...]   leader first, then members, with the
            kubeconfig default applied; a joinConfig-only leader is not listed
        fleet.spec.tokens.ttl_seconds / rotate_before_seconds, fleet.spec.wait.timeout_seconds,
        fleet.spec.ocm.bootstrap_token.ttl_seconds
        fleet.spec.cluster_set.namespace            Antrea leader namespace
        fleet.spec.antrea.member_namespace          Antrea member namespace
    ClusterRef                 name, role, kubeconfig (absolute Path), context (None: current),
                               api_server, ca_sha256, labels
    parse_duration / format_duration, BUNDLES, API_VERSION

Invariants: paths in a loaded Fleet are absolute (`~` and `${ENV}` expanded, relative ones
resolved against the fleet file's directory); sha256 pins are stored without the `sha256:`
prefix; api servers without a trailing slash.
"""

from __future__ import annotations

from fleetplan.config.durations import format_duration, parse_duration
from fleetplan.config.loading import CheckedFleet, check_fleet_file, load_fleet
from fleetplan.config.models import API_VERSION, BUNDLES, ClusterRef, Fleet

__all__ = [
    "API_VERSION",
    "BUNDLES",
    "CheckedFleet",
    "ClusterRef",
    "Fleet",
    "check_fleet_file",
    "format_duration",
    "load_fleet",
    "parse_duration",
]
