"""The OCM handlers plug into the registry; a joined spoke's expired bootstrap token is not re-minted."""

from __future__ import annotations

from datetime import UTC, datetime

from fleetplan.addrs import Address
from fleetplan.live import handlers
from fleetplan.live.ocm_handlers import AcceptClusterHandler, ReleaseClusterHandler
from fleetplan.live.ocm_tokens import BootstrapTokenSecretHandler, BoundBootstrapTokenHandler
from fleetplan.stacks.desired import Handler

TOKEN = Address.parse("hub/fleetplan.dev/BoundToken/open-cluster-management/"
                      "agent-registration-bootstrap-west")
KLUSTERLET = Address.parse("west/operator.open-cluster-management.io/Klusterlet/-/klusterlet")
OPTIONS = {"serviceAccount": "agent-registration-bootstrap-west", "ttlSeconds": 3600,
           "rotateBeforeSeconds": 900,
           "neededUntil": [{"address": str(KLUSTERLET), "condition": "HubConnectionDegraded",
                            "status": "False"}]}


def _assess(klusterlet_status: str | None) -> handlers.Assessment:
    live = {}
    if klusterlet_status is not None:
        live[KLUSTERLET] = {"metadata": {"name": "klusterlet"}, "status": {"conditions": [
            {"type": "HubConnectionDegraded", "status": klusterlet_status}]}}
    expired = datetime(2020, 1, 1, tzinfo=UTC).isoformat()
    item = handlers.AssessInput(TOKEN, OPTIONS, True, {"expiry": expired}, live,
                                datetime(2020, 1, 2, tzinfo=UTC).timestamp())
    return handlers.lookup(Handler.BOUND_TOKEN).assess(item)


def test_registry_holds_the_ocm_handlers() -> None:
    assert isinstance(handlers.lookup(Handler.ACCEPT_CLUSTER), AcceptClusterHandler)
    assert isinstance(handlers.lookup(Handler.RELEASE_CLUSTER), ReleaseClusterHandler)
    assert isinstance(handlers.lookup(Handler.BOUND_TOKEN), BoundBootstrapTokenHandler)


def test_expired_token_of_a_joined_spoke_is_not_rotated() -> None:
    assessment = _assess("False")
    assert assessment.action == "no-op" and "no longer uses it" in assessment.reason


def test_expired_token_of_a_spoke_still_bootstrapping_is_rotated() -> None:
    assert _assess("True").action == "update"
    assert _assess(None).action == "update"


def test_acceptance_is_replanned_when_labels_change() -> None:
    handler = AcceptClusterHandler()
    address = Address.parse("hub/fleetplan.dev/ClusterAcceptance/-/west")
    first = handlers.AssessInput(address, {"labels": {"env": "prod"}}, False, {}, {}, 0.0)
    assert handler.assess(first).action == "create"
    work = handlers.Work(address, "v1", None, {"labels": {"env": "prod"}})
    outputs = handler.read(None, work).outputs  # type: ignore[arg-type]
    same = handlers.AssessInput(address, {"labels": {"env": "prod"}}, True, outputs, {}, 0.0)
    changed = handlers.AssessInput(address, {"labels": {"env": "dev"}}, True, outputs, {}, 0.0)
    assert handler.assess(same).action == "no-op"
    assert handler.assess(changed).action == "update"


def test_bootstrap_token_secret_expires_as_configured_and_is_reminted_only_while_needed() -> None:
    handler = handlers.lookup(Handler.BOOTSTRAP_TOKEN)
    assert isinstance(handler, BootstrapTokenSecretHandler)
    address = Address.parse("hub/fleetplan.dev/BootstrapToken/kube-system/agent-registration-bootstrap-west")
    options = {**OPTIONS, "ttlSeconds": 60, "rotateBeforeSeconds": 15}
    minted = datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    outputs = {"expiry": datetime.fromtimestamp(minted + 60, UTC).isoformat()}

    def at(seconds: float, joined: bool | None) -> str:
        live = {}
        if joined is not None:
            live[KLUSTERLET] = {"status": {"conditions": [
                {"type": "HubConnectionDegraded", "status": "False" if joined else "True"}]}}
        return handler.assess(handlers.AssessInput(address, options, True, outputs, live, minted + seconds)).action

    assert handler.assess(handlers.AssessInput(address, options, False, {}, {}, minted)).action == "create"
    assert at(30, joined=None) == "no-op"  # valid for another 30s, more than rotateBefore
    assert at(50, joined=False) == "update"  # within rotateBefore of its expiry, spoke not joined
    assert at(61, joined=None) == "update"  # expired, spoke not seen
    assert at(61, joined=True) == "no-op"  # expired, but the spoke holds its certificate
