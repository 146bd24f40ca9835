"""The one identity type: an `Address` names one thing fleetplan manages on one cluster.

It is the key of graph nodes, diff entries, plan steps and state entries. Its string form is
`cluster/group/kind/namespace/name`, with `core` for the empty API group and `-` for a
cluster-scoped object, and `parse(str(a)) == a` always holds. Things that are not stored objects
(a minted token, an accepted CSR) use the `fleetplan.dev` group and a kind of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetplan.errors import FleetplanError

CORE = "core"
CLUSTER_SCOPED = "-"
_PART = re.compile(r"^[A-Za-z0-9.:_-]+$")


@dataclass(frozen=True, order=True)
class Address:
    cluster: str
    group: str  # "" for the core API group
    kind: str
    namespace: str  # "" when cluster-scoped
    name: str

    def __post_init__(self) -> None:
        for field in ("cluster", "kind", "name"):
            value = getattr(self, field)
            if not value or not _PART.match(value):
                raise FleetplanError(f"invalid address part {field}={value!r}",
                                     hint="address parts are DNS-style names without '/'")

    # Addresses key every dict of a run (graph, plan, state, walker) and never change: the hash
    # and the string form are computed once (stored beside the fields, not as fields).
    def __hash__(self) -> int:
        try:
            return self._hash  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            value = hash((self.cluster, self.group, self.kind, self.namespace, self.name))
            object.__setattr__(self, "_hash", value)
            return value

    def __str__(self) -> str:
        try:
            return self._text  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            text = "/".join((self.cluster, self.group or CORE, self.kind, self.namespace or CLUSTER_SCOPED,
                             self.name))
            object.__setattr__(self, "_text", text)
            return text

    @classmethod
    def parse(cls, text: str) -> Address:
        parts = text.split("/")
        if len(parts) != 5 or not all(parts):
            raise FleetplanError(f"invalid address {text!r}",
                                 hint="write cluster/group/kind/namespace/name, e.g. "
                                      "west/core/Secret/kube-system/member-token ('core' for the "
                                      "core group, '-' for a cluster-scoped object)")
        cluster, group, kind, namespace, name = parts
        return cls(cluster, "" if group == CORE else group, kind,
                   "" if namespace == CLUSTER_SCOPED else namespace, name)

    @property
    def api_group_kind(self) -> tuple[str, str]:
        return (self.group, self.kind)

    def matches(self, pattern: str) -> bool:
        """`--target` matching: a full address, or a prefix of whole parts (`west`, `west/apps`)."""
        mine = str(self).split("/")
        theirs = pattern.strip("/").split("/")
        return len(theirs) <= 5 and all(a == b or b == "*" for a, b in zip(mine, theirs, strict=False))
