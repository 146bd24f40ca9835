"""From a loaded `Fleet` to what planning needs: desired resources, cluster accesses, connections.

This is the one place that knows which stacks exist. The main stack (`spec.stack`, absent for
`stack: none`) and the generic `resources` stack both contribute; `only` (the hidden `--only`
option, kept for the engine's, reliability and controller tests) narrows to some of them. Stacks
that bring their own handlers register them when imported here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from fleetplan.config.models import Fleet
from fleetplan.errors import ConfigError, Diagnostic
from fleetplan.live.clusters import KubeCluster
from fleetplan.live.kubeconfigs import ClusterAccess
from fleetplan.stacks import resources as resources_stack
from fleetplan.stacks.desired import DesiredFleet, DesiredResource, Probe

STACKS = ("antrea", "ocm", "resources")
# Modules that register handlers for a stack's operations (imported for their side effect).
_HANDLER_MODULES = {"ocm": ("fleetplan.live.ocm_handlers",), "antrea": ("fleetplan.live.antrea_handlers",)}


def desired_for(fleet: Fleet, only: Sequence[str] = ()) -> DesiredFleet:
    chosen = tuple(only) or ((fleet.spec.stack, "resources") if fleet.spec.stack != "none" else ("resources",))
    unknown = [s for s in chosen if s not in STACKS]
    if unknown:
        raise ConfigError(f"unknown stack {unknown[0]!r}", hint=f"choose from {', '.join(STACKS)}")
    resources: list[DesiredResource] = []
    warnings: list[str] = []
    diagnostics: list[Diagnostic] = []
    probes: list[Probe] = []
    for stack in chosen:
        part = _render(stack, fleet)
        resources.extend(part.resources)
        warnings.extend(part.warnings)
        diagnostics.extend(part.diagnostics)
        probes.extend(part.probes)
    return DesiredFleet(fleet.name, tuple(resources), tuple(warnings), tuple(diagnostics), tuple(probes))


def accesses_for(fleet: Fleet) -> dict[str, ClusterAccess]:
    return {
        ref.name: ClusterAccess(ref.name, str(ref.kubeconfig), ref.context, ref.ca_sha256)
        for ref in fleet.clusters()
    }


def connect(accesses: Mapping[str, ClusterAccess]) -> dict[str, KubeCluster]:
    """One client per cluster (kubeconfigs are loaded in parallel: exec plugins may be slow)."""
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(accesses)))) as pool:
        made = {name: pool.submit(KubeCluster, access) for name, access in accesses.items()}
        return {name: future.result() for name, future in made.items()}


def _render(stack: str, fleet: Fleet) -> DesiredFleet:
    for module in _HANDLER_MODULES.get(stack, ()):
        importlib.import_module(module)
    if stack == "resources":
        return resources_stack.desired_fleet(fleet)
    if stack == "antrea":
        from fleetplan.stacks import antrea

        return antrea.desired_fleet(fleet)
    from fleetplan.stacks import ocm

    return ocm.render_ocm(fleet)
