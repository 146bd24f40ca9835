"""Values that carry secrets (a minted token, a Secret's data, a resolved body) never show them in
their repr, so an assertion message, a log line or a traceback cannot leak them."""

from __future__ import annotations

from fleetplan.addrs import Address
from fleetplan.apply.hooks import Outcome, Status
from fleetplan.live.handlers import Result, Work
from fleetplan.plan.model import Action, Step

TOKEN = "eyJhbGciOiJSUzI1NiJ9.secret-token-value"
ENCODED = "c2VjcmV0LXRva2VuLXZhbHVl"
ADDRESS = Address.parse("west/core/Secret/kube-system/member-token")
BODY = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-token"}, "data": {"token": ENCODED}}


def test_result_repr_hides_secret_outputs_and_the_object() -> None:
    result = Result(uid="u-1", outputs={"namespace": "kube-system"}, secrets={"token": TOKEN}, obj=BODY)
    text = repr(result)
    assert TOKEN not in text and ENCODED not in text
    assert "u-1" in text and "kube-system" in text  # what is safe to show still is


def test_step_work_and_outcome_reprs_hide_bodies() -> None:
    step = Step(ADDRESS, Action.CREATE, "not on the cluster", api_version="v1", body=BODY)
    work = Work(address=ADDRESS, api_version="v1", body=BODY)
    outcome = Outcome(step, Status.OK, result=Result(secrets={"token": TOKEN}, obj=BODY))
    for value in (step, work, outcome):
        text = repr(value)
        assert ENCODED not in text and TOKEN not in text, text
        assert "member-token" in text  # the address is still there to say which step it is
