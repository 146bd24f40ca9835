"""Scaffold a commented fleet.yaml from kubeconfigs (`fleetplan init`).

Two sources: a directory of kubeconfig files (one cluster per file, named after the file), or
named contexts of one kubeconfig. The text is rendered, then validated with the same loader users
run, so `init` never writes a file that `validate` would refuse. Cluster names are derived from
file or context names and made DNS-1123; the leader defaults to the first cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fleetplan.config.kubeconfigs import read_kubeconfig
from fleetplan.config.models import API_VERSION
from fleetplan.errors import ConfigError, Diagnostic

# The release each stack is scaffolded with: the newest this fleetplan was tested against.
DEFAULT_VERSIONS = {"antrea": "v2.7.0", "ocm": "v1.3.1"}
KUBECONFIG_SUFFIXES = ("", ".yaml", ".yml", ".kubeconfig", ".conf", ".config")


@dataclass(frozen=True)
class ScaffoldCluster:
    name: str
    kubeconfig: Path
    context: str | None


def dns_label(text: str) -> str:
    """The nearest DNS-1123 label: lower case, [a-z0-9-], no leading/trailing dash, <= 63 chars."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return label or "cluster"


def clusters_from_dir(directory: Path) -> list[ScaffoldCluster]:
    """One cluster per kubeconfig file in `directory`, named after the file (sorted by name)."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory",
                          hint="pass the directory that holds one kubeconfig per cluster")
    found: list[ScaffoldCluster] = []
    for path in sorted(directory.iterdir()):
        if not path.is_file() or path.name.startswith("."):
            continue
        stem, suffix = path.stem, path.suffix
        if suffix not in KUBECONFIG_SUFFIXES:
            continue
        summary = read_kubeconfig(path)
        if not summary.servers:
            continue
        found.append(ScaffoldCluster(dns_label(stem if suffix else path.name), path.absolute(), None))
    if not found:
        raise ConfigError(f"{directory}: no kubeconfig files found",
                          hint="name them after the clusters, e.g. north.yaml, west.yaml, east.yaml")
    return found


def clusters_from_contexts(kubeconfig: Path, contexts: list[str]) -> list[ScaffoldCluster]:
    """One cluster per named context of one kubeconfig file."""
    summary = read_kubeconfig(kubeconfig)
    missing = [c for c in contexts if c not in summary.servers]
    if missing:
        known = ", ".join(sorted(summary.servers)) or "none"
        raise ConfigError(f"{kubeconfig}: no context named {', '.join(missing)}",
                          hint=f"contexts in that file: {known}")
    return [ScaffoldCluster(dns_label(c), kubeconfig.absolute(), c) for c in contexts]


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z0-9_./~-]+", text) else '"' + text.replace('"', '\\"') + '"'


def _cluster_lines(cluster: ScaffoldCluster, indent: str, first: str) -> list[str]:
    more = indent + " " * len(first)
    lines = [f"{indent}{first}name: {cluster.name}", f"{more}kubeconfig: {_quote(str(cluster.kubeconfig))}"]
    if cluster.context:
        lines.append(f"{more}context: {_quote(cluster.context)}")
    return lines


def render_fleet(name: str, stack: str, leader: ScaffoldCluster, members: list[ScaffoldCluster]) -> str:
    """The fleet.yaml text: every choice commented, defaults spelled out where users change them."""
    version = DEFAULT_VERSIONS[stack]
    out = [
        "# yaml-language-server: $schema=https://fleetplan.dev/schemas/fleet.schema.json",
        "# Written by `fleetplan init`. Check it with `fleetplan validate -f <this file>`, then",
        "# `fleetplan plan` shows what `fleetplan apply` would do.",
        f"apiVersion: {API_VERSION}",
        "kind: Fleet",
        "metadata:",
        f"  name: {name}            # also the ownership label on everything fleetplan creates",
        "spec:",
        f"  stack: {stack}          # antrea | ocm",
        f"  version: {version}         # the {stack} release whose manifests are applied",
        "  # manifests: {mirror: ./mirror}   # offline: a directory laid out <stack>/<version>/...",
        "  clusterSet:",
        f"    name: {name}-set",
    ]
    if stack == "antrea":
        out.append("    namespace: antrea-multicluster   # the leader's namespace")
    role = "leader" if stack == "antrea" else "hub"
    out.append(f"  leader:                 # the {role}")
    out += _cluster_lines(leader, "    ", "")
    out.append("    # apiServer: https://...   # how members reach it; default: its kubeconfig server")
    out.append("  members:")
    for member in members:
        out += _cluster_lines(member, "    ", "- ")
    if stack == "antrea":
        out += [
            "  tokens:",
            "    strategy: per-member   # one token per member; `shared` is spoofable",
            "    kind: bound            # bound (TokenRequest, expires) | secret (long-lived)",
            "    ttl: 24h",
            "    rotateBefore: 6h       # plan rotates a token this close to expiry",
        ]
    else:
        out += [
            "  ocm:",
            "    klusterlet: {mode: Default}        # Default | Singleton",
            "    bootstrapToken: {kind: bound, ttl: 1h}   # minted at apply time, never stored",
        ]
    out += [
        "  wait: {timeout: 5m}",
        "  lifecycle: {preventDestroy: []}   # e.g. [leader] to refuse destroying it",
        f"  state: {{backend: local, path: state/{name}.json}}",
        "",
    ]
    return "\n".join(out)


def scaffold(name: str, stack: str, clusters: list[ScaffoldCluster], leader: str | None) -> str:
    """Pick the leader (by name, else the first cluster) and render; refuse what validate would."""
    if len(clusters) < 2:
        raise ConfigError("a fleet needs a leader and at least one member",
                          hint="give two or more kubeconfigs or contexts")
    names = [c.name for c in clusters]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"two clusters would both be named {dupes[0]}",
                          hint="rename the kubeconfig files or contexts so their names differ")
    chosen = leader or names[0]
    if chosen not in names:
        raise ConfigError(f"--leader {chosen}: no such cluster", hint=f"clusters found: {', '.join(names)}")
    lead = next(c for c in clusters if c.name == chosen)
    return render_fleet(dns_label(name), stack, lead, [c for c in clusters if c is not lead])


def write_scaffold(text: str, target: Path, *, force: bool) -> None:
    """Write the fleet file, validating it first through a temporary sibling; never clobber."""
    from fleetplan.config.loading import load_fleet

    if target.exists() and not force:
        raise ConfigError(f"{target} already exists", hint="pass --force to overwrite it, or -o to write elsewhere")
    target.parent.mkdir(parents=True, exist_ok=True)
    draft = target.with_name(f".{target.name}.draft")
    draft.write_text(text, encoding="utf-8")
    try:
        load_fleet(draft, offline=False)
    except ConfigError as err:
        draft.unlink(missing_ok=True)
        raise ConfigError([Diagnostic("the scaffolded fleet does not validate: " + d.summary,
                                      location=d.location, hint=d.hint) for d in err.diagnostics]) from err
    draft.replace(target)
