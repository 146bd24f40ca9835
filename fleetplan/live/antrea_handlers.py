"""The Antrea handlers, plugged into the engine's registry: teardown guards around members leaving.

- `antrea-leader-clusterset`: the leader's ClusterSet, applied like any object. Its removal is the
  guard `antctl mc destroy` lacks: it waits (up to the step's timeout) for every
  MemberClusterAnnounce in the leader namespace to go, because members leave asynchronously (the
  member controller deletes its announce when its own ClusterSet is deleted), then refuses while
  any remains, naming them, unless the step carries `options.force` (`destroy --force`).
- `antrea-member-bound-token` / `antrea-member-secret-token`: a member's token on the leader,
  converged by the engine's own token handlers. Removing one first waits (bounded) until the member
  it was made for has left, i.e. `member-announce-from-<id>` is gone, so the member can still
  authenticate while it deletes its announce; the ID comes from the ServiceAccount's
  `multicluster.antrea.io/cluster-id` annotation. A member that never leaves (its cluster is gone)
  does not block the revocation: after the wait the token is removed anyway, and the run says so.

Deletion steps of resources no longer in the fleet carry no options, so everything these handlers
need at removal time is derived from the step's address and what is live. Importing this module
registers all three (idempotent).
"""

from __future__ import annotations

import time
from typing import Any

from fleetplan.errors import ClusterError
from fleetplan.live import handlers
from fleetplan.live import readiness as readying
from fleetplan.live.clusters import Cluster
from fleetplan.stacks.desired import Handler

MC_GROUP = "multicluster.crd.antrea.io"
ANNOUNCE_API = f"{MC_GROUP}/v1alpha1"
ANNOUNCE_KIND = "MemberClusterAnnounce"
ANNOUNCE_PREFIX = "member-announce-from-"
CLUSTER_ID_ANNOTATION = "multicluster.antrea.io/cluster-id"
LEAVE_WAIT_SECONDS = 60.0  # how long revoking a member's token waits for it to leave


def _announces(cluster: Cluster, namespace: str) -> list[str]:
    if cluster.resource_info(ANNOUNCE_API, ANNOUNCE_KIND) is None:
        return []  # the CRD is already gone, so no announce can remain
    return sorted(o["metadata"]["name"] for o in cluster.list(ANNOUNCE_API, ANNOUNCE_KIND, namespace, ""))


def wait_until_gone(cluster: Cluster, namespace: str, wanted: set[str] | None, timeout: float,
                    progress: readying.Progress, what: str) -> list[str]:
    """Poll until no announce (of `wanted`, or any) is left in `namespace`; the ones that remain."""
    deadline = time.monotonic() + timeout
    next_report = time.monotonic() + 5
    while True:
        left = [n for n in _announces(cluster, namespace) if wanted is None or n in wanted]
        now = time.monotonic()
        if not left or now >= deadline:
            return left
        if now >= next_report:
            progress(f"waiting for {what} ({', '.join(left)} on {cluster.name})")
            next_report = now + 10
        time.sleep(0.5)


class LeaderClusterSetHandler(handlers.ApplyHandler):
    """The leader ClusterSet: refuses deletion while members still announce themselves."""

    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        namespace = work.address.namespace
        if not work.options.get("force"):
            left = wait_until_gone(cluster, namespace, None, work.timeout, progress,
                                   "members to leave before the leader's ClusterSet goes")
            if left:
                members = ", ".join(n.removeprefix(ANNOUNCE_PREFIX) for n in left)
                raise ClusterError(
                    f"refusing to delete ClusterSet {work.address.name} on {cluster.name}: "
                    f"{len(left)} MemberClusterAnnounce(s) remain in {namespace} ({', '.join(left)}), "
                    f"so member(s) {members} are still joined",
                    address=str(work.address),
                    hint="make those members leave first (remove them from their fleet, or `antctl mc "
                         "leave` there), or pass --force to strand them")
        super().remove(cluster, work, progress)


def _member_of(cluster: Cluster, work: handlers.Work) -> str | None:
    account = str(work.options.get("serviceAccount", work.address.name))
    found = cluster.get("v1", "ServiceAccount", work.address.namespace, account)
    annotations: dict[str, Any] = ((found or {}).get("metadata") or {}).get("annotations") or {}
    member = annotations.get(CLUSTER_ID_ANNOTATION)
    return member if isinstance(member, str) and member else None


def _await_leave(cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
    member = _member_of(cluster, work)
    if member is None or work.options.get("force"):
        return
    left = wait_until_gone(cluster, work.address.namespace, {ANNOUNCE_PREFIX + member},
                           min(work.timeout, LEAVE_WAIT_SECONDS), progress,
                           f"member {member} to leave before its token is revoked")
    if left:
        progress(f"member {member} did not leave; revoking its token anyway ({left[0]} stays until "
                 "the leader's stale-member cleanup)")


class MemberBoundTokenHandler(handlers.BoundTokenHandler):
    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        _await_leave(cluster, work, progress)
        super().remove(cluster, work, progress)


class MemberSecretTokenHandler(handlers.SecretTokenHandler):
    def remove(self, cluster: Cluster, work: handlers.Work, progress: readying.Progress) -> None:
        _await_leave(cluster, work, progress)
        super().remove(cluster, work, progress)


def register_antrea_handlers() -> None:
    handlers.register(Handler.ANTREA_LEADER_CLUSTERSET, LeaderClusterSetHandler())
    handlers.register(Handler.ANTREA_MEMBER_BOUND_TOKEN, MemberBoundTokenHandler())
    handlers.register(Handler.ANTREA_MEMBER_SECRET_TOKEN, MemberSecretTokenHandler())


register_antrea_handlers()
