"""The state value and its versioned JSON form.

Invariants:
- `State` and its parts are frozen; changes make new values (`with_record`, `journaled`, ...).
- No secret value is ever held here: sensitive outputs are kept only as `sha256:` hashes.
- `lineage` is fixed when a state is first created; `serial` grows by one on every write (the store
  enforces it). Together they let a saved plan detect that the state moved underneath it.
- `clusters` records how each cluster that holds recorded objects was reached (kubeconfig path, or
  in controller mode the kubeconfig Secret's namespace/name/key; context; CA pin: names and paths
  only, never credentials), so objects on a cluster that has left the fleet can still be found
  and deleted. It is an optional key: older states read as empty.
- The JSON form carries `format_version`; reading a newer version is refused, older ones are
  upgraded step by step by `_UPGRADES` (format 1 is the first, so the chain is empty today).
"""

from __future__ import annotations

import hashlib
import json
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleetplan.addrs import Address
from fleetplan.errors import FleetplanError, StateError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ResourceRecord:
    """One object (or operation result) fleetplan created and still owns."""

    address: Address
    api_version: str  # "v1", "apps/v1"; "" for handler results that are not objects
    handler: str = "apply"
    uid: str | None = None
    applied_hash: str = ""  # hash of the desired body last applied (drift vs config change)
    depends_on: tuple[Address, ...] = ()  # kept so deletions of no-longer-desired objects are ordered
    outputs: Mapping[str, str] = field(default_factory=dict)  # non-secret outputs (e.g. expiry)
    secret_hashes: Mapping[str, str] = field(default_factory=dict)  # output name -> sha256 of value
    updated_at: str = ""


@dataclass(frozen=True)
class JournalEntry:
    """A side effect that was started; removed again once its result is recorded."""

    address: Address
    action: str  # the plan action: create | update | replace | delete | read
    run_id: str
    started_at: str
    api_version: str = ""


@dataclass(frozen=True)
class State:
    lineage: str
    fleet: str
    serial: int = 0
    resources: Mapping[Address, ResourceRecord] = field(default_factory=dict)
    journal: tuple[JournalEntry, ...] = ()
    format_version: int = FORMAT_VERSION
    # cluster name -> how it was reached ({"name", "kubeconfig", "context", "caSha256"}).
    clusters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def new(cls, fleet: str) -> State:
        return cls(lineage=str(uuid.uuid4()), fleet=fleet)

    def with_record(self, record: ResourceRecord) -> State:
        return replace(self, resources={**self.resources, record.address: record})

    def without(self, address: Address) -> State:
        return replace(self, resources={a: r for a, r in self.resources.items() if a != address})

    def journaled(self, entry: JournalEntry) -> State:
        kept = tuple(e for e in self.journal if e.address != entry.address)
        return replace(self, journal=(*kept, entry))

    def unjournaled(self, address: Address) -> State:
        return replace(self, journal=tuple(e for e in self.journal if e.address != address))

    def journal_for(self, address: Address) -> JournalEntry | None:
        return next((e for e in self.journal if e.address == address), None)

    def with_clusters(self, accesses: Mapping[str, Mapping[str, Any]]) -> State:
        """Record how clusters are reached (newer entries win); see `pruned_clusters`."""
        return replace(self, clusters={**self.clusters, **{k: dict(v) for k, v in accesses.items()}})

    def pruned_clusters(self) -> State:
        """Only the clusters that still hold a recorded or journaled object."""
        used = {a.cluster for a in self.resources} | {e.address.cluster for e in self.journal}
        kept = {k: v for k, v in self.clusters.items() if k in used}
        return self if len(kept) == len(self.clusters) else replace(self, clusters=kept)


def secret_hash(value: str | bytes) -> str:
    data = value.encode() if isinstance(value, str) else value
    return "sha256:" + hashlib.sha256(data).hexdigest()


def to_dict(state: State, *, records: bool = True) -> dict[str, Any]:
    """The JSON document of a state; `records=False` leaves out `resources` (see `dumps`)."""
    return {
        "format_version": FORMAT_VERSION,
        "lineage": state.lineage,
        "serial": state.serial,
        "fleet": state.fleet,
        **({"resources": [_record_to_dict(state.resources[a]) for a in sorted(state.resources, key=str)]}
           if records else {}),
        "journal": [
            {
                "address": str(e.address),
                "action": e.action,
                "run_id": e.run_id,
                "started_at": e.started_at,
                "api_version": e.api_version,
            }
            for e in state.journal
        ],
        **({"clusters": {k: dict(state.clusters[k]) for k in sorted(state.clusters)}} if state.clusters else {}),
    }


def from_dict(data: Any, *, source: str) -> State:
    """Parse (and upgrade) a decoded state document; `source` names it in errors."""
    if not isinstance(data, dict) or "format_version" not in data:
        raise StateError(
            f"{source} is not a fleetplan state (no format_version)",
            hint="point the fleet's state.path at a state file written by fleetplan",
        )
    version = data["format_version"]
    if not isinstance(version, int) or version < 1:
        raise StateError(f"{source} has an invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise StateError(
            f"{source} was written by a newer fleetplan (state format {version}, this "
            f"fleetplan reads up to {FORMAT_VERSION})",
            hint="upgrade fleetplan",
        )
    while version < FORMAT_VERSION:
        data, version = _UPGRADES[version](data), version + 1
    try:
        records = (_record_from_dict(r) for r in data["resources"])
        return State(
            lineage=str(data["lineage"]),
            fleet=str(data["fleet"]),
            serial=int(data["serial"]),
            resources={r.address: r for r in records},
            journal=tuple(
                JournalEntry(
                    Address.parse(e["address"]),
                    e["action"],
                    e["run_id"],
                    e["started_at"],
                    e.get("api_version", ""),
                )
                for e in data.get("journal", [])
            ),
            clusters={str(k): dict(v) for k, v in (data.get("clusters") or {}).items()},
        )
    except (KeyError, TypeError, ValueError) as err:
        raise StateError(
            f"{source} is damaged: {type(err).__name__}: {err}",
            hint="restore the previous version from the .backup file next to it",
        ) from err
    except FleetplanError as err:  # e.g. an unparsable address: the state file is what is wrong
        raise StateError(
            f"{source} is damaged: {err.diagnostics[0].summary}",
            hint="restore the previous version from the .backup file next to it",
        ) from err


def dumps(state: State) -> str:
    """The state file's text: top-level keys one per line, one resource record per line.

    Written after every step, so its cost matters at fleet scale: json's `indent=` path is the
    pure-Python encoder, so each record is encoded compactly by the C encoder instead, and records
    (immutable) are encoded once per value and reused by later writes (`_encoded_record`).
    """
    doc = to_dict(state, records=False)
    records = [_encoded_record(state.resources[a]) for a in sorted(state.resources, key=str)]
    lines = ["{"]
    for key, value in doc.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value, separators=_SEPARATORS)},")
    body = ",\n".join(f"    {line}" for line in records)
    lines.append(f'  "resources": [\n{body}\n  ]' if records else '  "resources": []')
    return "\n".join(lines) + "\n}\n"


_SEPARATORS = (", ", ": ")
# id(record) -> (weak reference to it, its encoded line); the weak reference tells a live record
# from a new one that reuses a dead one's id.
_ENCODED: dict[int, tuple[weakref.ref[ResourceRecord], str]] = {}


def _encoded_record(record: ResourceRecord) -> str:
    cached = _ENCODED.get(id(record))
    if cached is not None and cached[0]() is record:
        return cached[1]
    key = id(record)

    def forget(_ref: weakref.ref[ResourceRecord]) -> None:
        _ENCODED.pop(key, None)

    line = json.dumps(_record_to_dict(record), separators=_SEPARATORS)
    _ENCODED[key] = (weakref.ref(record, forget), line)
    return line


# format N -> N+1 upgrade functions; each takes and returns the decoded JSON document.
_UPGRADES: dict[int, Any] = {}


def _record_to_dict(record: ResourceRecord) -> dict[str, Any]:
    return {
        "address": str(record.address),
        "api_version": record.api_version,
        "handler": record.handler,
        "uid": record.uid,
        "applied_hash": record.applied_hash,
        "depends_on": [str(a) for a in record.depends_on],
        "outputs": dict(sorted(record.outputs.items())),
        "secret_hashes": dict(sorted(record.secret_hashes.items())),
        "updated_at": record.updated_at,
    }


def _record_from_dict(data: dict[str, Any]) -> ResourceRecord:
    return ResourceRecord(
        address=Address.parse(data["address"]),
        api_version=data["api_version"],
        handler=data.get("handler", "apply"),
        uid=data.get("uid"),
        applied_hash=data.get("applied_hash", ""),
        depends_on=tuple(Address.parse(a) for a in data.get("depends_on", [])),
        outputs=dict(data.get("outputs", {})),
        secret_hashes=dict(data.get("secret_hashes", {})),
        updated_at=data.get("updated_at", ""),
    )
