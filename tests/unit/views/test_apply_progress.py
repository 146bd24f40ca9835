"""The human apply progress: counters, elapsed times, heartbeats for silent steps, and a status
line only on a terminal with colour (never a control character in a CI log)."""

from __future__ import annotations

import io

from fleetplan.addrs import Address
from fleetplan.apply.hooks import ApplySummary, Outcome, Status
from fleetplan.cli.progress import HEARTBEAT, HumanProgress
from fleetplan.errors import Diagnostic
from fleetplan.plan.model import Action, Mode, Plan, Step

CRD = Step(Address.parse("c1/apiextensions.k8s.io/CustomResourceDefinition/-/things.x.io"), Action.CREATE, "new")
DEPLOY = Step(Address.parse("c1/apps/Deployment/apps/web"), Action.CREATE, "new")
OLD = Step(Address.parse("c2/core/ConfigMap/apps/old"), Action.DELETE, "removed")
SAME = Step(Address.parse("c2/core/ConfigMap/apps/same"), Action.NOOP, "up to date")
PLAN = Plan("demo", Mode.NORMAL, (CRD, DEPLOY, OLD, SAME), None, 0, "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run(view: HumanProgress, clock: Clock) -> None:
    view.plan_starting(PLAN)
    view.step_starting(CRD)
    view.step_starting(SAME)
    clock.now += 2
    view.step_finished(Outcome(CRD, Status.OK, seconds=2.0))
    view.step_finished(Outcome(SAME, Status.OK))
    view.step_starting(DEPLOY)
    clock.now += HEARTBEAT
    view.tick()  # silent for HEARTBEAT seconds: a heartbeat
    view.tick()  # nothing new to say yet
    view.step_progress(DEPLOY, "waiting for Deployment web available (0/1 replicas available, 0 updated)")
    clock.now += 25
    view.step_finished(Outcome(DEPLOY, Status.FAILED, error=Diagnostic("timed out"), seconds=35.0))
    view.step_finished(Outcome(OLD, Status.SKIPPED, root_cause=DEPLOY.address))
    view.plan_finished(ApplySummary())


def test_plain_output_counts_times_and_heartbeats_without_control_characters() -> None:
    out, clock = io.StringIO(), Clock()
    _run(HumanProgress(color=False, live=False, out=out, clock=clock, ticker=False), clock)
    assert out.getvalue().splitlines() == [
        "c1/apiextensions.k8s.io/CustomResourceDefinition/-/things.x.io: Creating...",
        "c1/apiextensions.k8s.io/CustomResourceDefinition/-/things.x.io: Creation complete after 2.0s [1/3]",
        "c1/apps/Deployment/apps/web: Creating...",
        "c1/apps/Deployment/apps/web: Still creating... [10s elapsed]",
        "c1/apps/Deployment/apps/web: Still creating: waiting for Deployment web available "
        "(0/1 replicas available, 0 updated) [10s elapsed]",
        "c1/apps/Deployment/apps/web: Error after 35s: timed out [2/3]",
        "c2/core/ConfigMap/apps/old: Skipped: c1/apps/Deployment/apps/web failed [3/3]",
    ]
    assert "\033" not in out.getvalue() and "\r" not in out.getvalue()


def test_terminal_status_line_says_what_runs_and_is_erased_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    view = HumanProgress(color=True, live=True, out=out, clock=clock, ticker=False)
    view.plan_starting(PLAN)
    view.step_starting(DEPLOY)
    clock.now += 3
    view.step_progress(DEPLOY, "waiting for Deployment web available")
    assert view.status_text() == "[0/3 done, 1 running, 3.0s] waiting for Deployment web available (3.0s)"
    view.plan_finished(ApplySummary())
    text = out.getvalue()
    assert "[0/3 done, 1 running, 3.0s] waiting for Deployment web available (3.0s)" in text
    assert text.endswith("\r\033[K")  # the status line does not outlive the run


def test_the_ticker_thread_stops_with_the_run() -> None:
    out = io.StringIO()
    view = HumanProgress(color=False, live=False, out=out)
    view.plan_starting(PLAN)
    assert view._thread is not None and view._thread.is_alive()
    view.plan_finished(ApplySummary())
    assert not view._thread.is_alive()
