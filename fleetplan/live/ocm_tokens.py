"""The spokes' bootstrap tokens on the hub, and the rule "re-mint only while a spoke still needs it".

- `bootstrap-token` (`bootstrapToken.kind: secret`): a `bootstrap.kubernetes.io/token` Secret in
  `kube-system`, as `clusteradm init --use-bootstrap-token` makes, but one per bootstrap identity,
  with a random token ID and secret minted at apply time and an `expiration` `ttlSeconds` ahead.
  The API server stops accepting the token at that instant and kube-controller-manager's
  tokencleaner deletes the Secret. Its `auth-extra-groups` names the identity's own group
  (`options.group`), which the hub's ClusterRoleBinding and the acceptance's CSR check both use.
  A rotation creates a new Secret and leaves the old one to expire, so a spoke never holds a token
  that was retired under it; removal deletes every Secret of the identity (found by label).
- `bound-token` with `options.neededUntil`: the engine's TokenRequest handler, wrapped.

For both, `options.neededUntil` lists conditions (a spoke's Klusterlet `HubConnectionDegraded=False`)
that mean the token is no longer used: an expired token whose spokes all hold their signed
certificates is not re-minted, so a later apply issues a fresh token only when a spoke needs one.

Invariants: the token secret lives only in the Secret and in memory (`Result.secrets`); outputs
hold the expiry and the token ID, which is public (it names the Secret); time comes from
`AssessInput.now` and the injectable `clock`, so expiry is unit-testable.
"""

from __future__ import annotations

import base64
import secrets
import string
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from fleetplan.addrs import Address
from fleetplan.errors import ClusterError
from fleetplan.live import handlers
from fleetplan.live import readiness as readying
from fleetplan.live.clusters import Cluster, Obj, ca_pem
from fleetplan.live.reading import FLEET_LABEL, MANAGED_BY, MANAGED_BY_LABEL

TOKEN_TYPE = "bootstrap.kubernetes.io/token"
TOKEN_NAMESPACE = "kube-system"
IDENTITY_LABEL = "fleetplan.dev/bootstrap-token-for"
_ALPHABET = string.ascii_lowercase + string.digits  # what the bootstrap token format allows


def _condition_holds(obj: Obj | None, condition: str, status: str) -> bool:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == condition:
            return bool(item.get("status") == status)
    return False


def no_longer_needed(options: Mapping[str, Any], live: Mapping[Address, Obj]) -> bool:
    """Every `neededUntil` rule holds in `live` (and there is at least one rule)."""
    rules = options.get("neededUntil") or []
    return bool(rules) and all(
        _condition_holds(live.get(Address.parse(str(rule["address"]))), str(rule["condition"]),
                         str(rule.get("status", "True")))
        for rule in rules)


def _retire_unneeded(verdict: handlers.Assessment, item: handlers.AssessInput) -> handlers.Assessment:
    if verdict.action != "update" or not item.recorded or not no_longer_needed(item.options, item.live):
        return verdict
    return handlers.Assessment("no-op", f"not rotated ({verdict.reason}): every spoke it bootstraps "
                               "has joined and no longer uses it")


class BoundBootstrapTokenHandler:
    """The engine's bound-token handler, except that `neededUntil` can retire a token's rotation."""

    def __init__(self, inner: handlers.ResourceHandler) -> None:
        self.inner = inner
        self.object_backed = inner.object_backed
        self.outputs_readable = inner.outputs_readable

    def assess(self, item: handlers.AssessInput) -> handlers.Assessment:
        return _retire_unneeded(self.inner.assess(item), item)

    def converge(self, cluster: Cluster, work: handlers.Work,
                 progress: readying.Progress) -> handlers.Result:
        return self.inner.converge(cluster, work, progress)

    def read(self, cluster: Cluster, work: handlers.Work) -> handlers.Result:
        return self.inner.read(cluster, work)

    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        self.inner.remove(cluster, work, progress)


def _expiry(secret: Obj) -> datetime | None:
    raw = ((secret.get("data") or {}).get("expiration")) or ""
    try:
        text = base64.b64decode(raw).decode()
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class BootstrapTokenSecretHandler:
    """`bootstrap.kubernetes.io/token` Secrets of one identity (the address name). Options:
    ttlSeconds, rotateBeforeSeconds, group (its auth-extra-groups), fleet, neededUntil."""

    object_backed = False
    outputs_readable = True  # the newest unexpired Secret can be read back by the admin

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock

    def assess(self, item: handlers.AssessInput) -> handlers.Assessment:
        if not item.recorded:
            return handlers.Assessment("create", "no bootstrap token yet")
        expiry = item.record_outputs.get("expiry")
        if not expiry:
            return _retire_unneeded(handlers.Assessment("update", "the recorded token has no expiry"), item)
        ttl = float(item.options.get("ttlSeconds", 3600))
        remaining = datetime.fromisoformat(expiry).timestamp() - item.now
        if remaining <= float(item.options.get("rotateBeforeSeconds", ttl / 4)):
            state = "expired" if remaining <= 0 else f"expires at {expiry}, within rotateBefore"
            return _retire_unneeded(handlers.Assessment("update", f"bootstrap token {state}"), item)
        return handlers.Assessment("no-op", f"bootstrap token valid until {expiry}")

    def converge(self, cluster: Cluster, work: handlers.Work,
                 progress: readying.Progress) -> handlers.Result:
        token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
        token_secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
        expiry = datetime.fromtimestamp(self.clock() + int(work.options.get("ttlSeconds", 3600)), UTC)
        stamp = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
        labels = {IDENTITY_LABEL: work.address.name, MANAGED_BY_LABEL: MANAGED_BY}
        if work.options.get("fleet"):
            labels[FLEET_LABEL] = str(work.options["fleet"])
        cluster.apply({
            "apiVersion": "v1", "kind": "Secret", "type": TOKEN_TYPE,
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": TOKEN_NAMESPACE, "labels": labels},
            "stringData": {"token-id": token_id, "token-secret": token_secret, "expiration": stamp,
                           "usage-bootstrap-authentication": "true",
                           "auth-extra-groups": str(work.options["group"]),
                           "description": f"fleetplan: bootstrap token of {work.address.name}"}})
        progress(f"minted bootstrap token {token_id} for {work.address.name}, valid until {stamp}")
        return handlers.Result(outputs={"expiry": expiry.isoformat(timespec="seconds"), "tokenId": token_id},
                               secrets={"token": f"{token_id}.{token_secret}", "ca.crt": _hub_ca(cluster)})

    def _tokens(self, cluster: Cluster, identity: str) -> list[Obj]:
        return [s for s in cluster.list("v1", "Secret", TOKEN_NAMESPACE, f"{IDENTITY_LABEL}={identity}")
                if s.get("type") == TOKEN_TYPE]

    def read(self, cluster: Cluster, work: handlers.Work) -> handlers.Result:
        now = datetime.fromtimestamp(self.clock(), UTC)
        valid = [(e, s) for s in self._tokens(cluster, work.address.name) if (e := _expiry(s)) and e > now]
        if not valid:
            raise ClusterError(f"{work.address}: no unexpired bootstrap token of {work.address.name} "
                               f"on {cluster.name}", address=str(work.address),
                               hint="run `fleetplan plan` again: it mints a fresh one")
        expiry, newest = max(valid, key=lambda pair: pair[0])
        data = {k: base64.b64decode(v).decode() for k, v in (newest.get("data") or {}).items()}
        return handlers.Result(outputs={"expiry": expiry.isoformat(timespec="seconds"),
                                        "tokenId": data["token-id"]},
                               secrets={"token": f"{data['token-id']}.{data['token-secret']}",
                                        "ca.crt": _hub_ca(cluster)})

    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        for secret in self._tokens(cluster, work.address.name):
            cluster.delete("v1", "Secret", TOKEN_NAMESPACE, secret["metadata"]["name"])


def _hub_ca(cluster: Cluster) -> str:
    """The hub's CA as the engine verified it (the kubeconfig's), else the published root CA."""
    verified = ca_pem(cluster)
    if verified:
        return verified
    root = cluster.get("v1", "ConfigMap", TOKEN_NAMESPACE, "kube-root-ca.crt") or {}
    return str((root.get("data") or {}).get("ca.crt") or "")
