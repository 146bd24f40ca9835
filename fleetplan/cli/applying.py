"""`fleetplan apply [PLANFILE]` and `fleetplan destroy`: lock, plan (or load and check a saved
plan), confirm, walk, record state after every step, unlock.

Progress is printed by a view hook (`cli.progress.HumanProgress`, or JSON lines with `--json`);
the engine itself never prints. A run that had failures exits 1 and names each root cause;
dependents that were skipped are listed under it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from fleetplan.apply.executing import ClusterExecutor
from fleetplan.apply.hooks import ApplySummary, Hook, Hooks, Outcome, Status
from fleetplan.apply.killing import kill_switches, test_hooks_notice
from fleetplan.apply.recording import StateRecorder
from fleetplan.apply.walking import DEFAULT_PARALLELISM, walk_plan
from fleetplan.cli.planning import Session, color_enabled, file_option, only_option, print_plan
from fleetplan.cli.progress import HumanProgress
from fleetplan.errors import ApplyError, Diagnostic, PlanError
from fleetplan.live import reading
from fleetplan.plan import fleets, planfile, planning
from fleetplan.plan.model import Action, Mode, Plan, Step

JSON_EVENTS_VERSION = "1.0"


class JsonView(Hook):
    """JSON lines, one event per line; documented in docs/json-format.md."""

    def _emit(self, event: dict[str, Any]) -> None:
        click.echo(json.dumps({"format_version": JSON_EVENTS_VERSION, **event}))

    def plan_starting(self, plan: Plan) -> None:
        add, change, destroy = plan.counts()
        self._emit(
            {
                "type": "apply_start",
                "fleet": plan.fleet,
                "mode": plan.mode.value,
                "summary": {"add": add, "change": change, "destroy": destroy},
            }
        )

    def step_starting(self, step: Step) -> None:
        if step.action != Action.NOOP:
            self._emit({"type": "step_start", "address": str(step.address), "action": step.action.value})

    def step_progress(self, step: Step, message: str) -> None:
        self._emit({"type": "step_progress", "address": str(step.address), "message": message})

    def step_finished(self, outcome: Outcome) -> None:
        if outcome.step.action == Action.NOOP and outcome.status == Status.OK:
            return
        event: dict[str, Any] = {
            "type": "step_" + ("complete" if outcome.status == Status.OK else outcome.status.value),
            "address": str(outcome.step.address),
            "action": outcome.step.action.value,
            "seconds": round(outcome.seconds, 3),
        }
        if outcome.error:
            event["error"] = outcome.error.as_dict()
        if outcome.root_cause:
            event["root_cause"] = str(outcome.root_cause)
        self._emit(event)

    def plan_finished(self, summary: ApplySummary) -> None:
        add, change, destroy = summary.counts()
        self._emit(
            {
                "type": "apply_complete",
                "ok": not summary.failures,
                "summary": {"add": add, "change": change, "destroy": destroy},
                "failed": [str(o.step.address) for o in summary.failures],
                "skipped": [str(o.step.address) for o in summary.skipped],
            }
        )


def run_apply(
    session: Session,
    plan_path: str | None,
    *,
    mode: Mode,
    auto_approve: bool,
    parallelism: int,
    as_json: bool,
    color: bool,
    force: bool = False,
    targets: tuple[str, ...] = (),
) -> None:
    store = session.store
    with store.locked("destroy" if mode == Mode.DESTROY else "apply"):
        for warning in store.warnings:
            click.echo(warning.render(), err=True)
        state = store.read()
        if plan_path:
            plan = planfile.load(plan_path)
            if plan.fleet != session.fleet.name:
                raise PlanError(f"plan file {plan_path} is for fleet {plan.fleet}, not {session.fleet.name}")
            clusters = fleets.connect(plan.clusters)
            snapshot, problems = reading.read_snapshot(clusters, plan.fleet, dict(plan.read_set))
            # A cluster the plan already found unreachable may still be: its steps fail alone.
            dark = {s.address.cluster for s in plan.steps if s.action == Action.UNKNOWN}
            if [c for c in snapshot.unreachable if c not in dark] or (problems and not snapshot.unreachable):
                raise ApplyError(problems)
            planfile.check_fresh(plan, state, snapshot.fingerprint(dict(plan.read_set)))
            fresh = {r.address: reading.owned_body(r.body, plan.fleet) for r in session.desired.resources}
            plan = planfile.restore_secrets(plan, fresh)
        else:
            accesses = fleets.accesses_for(session.fleet)
            clusters = fleets.connect(accesses)
            plan = planning.plan_fleet(
                session.desired,
                clusters,
                state,
                planning.Options(
                    mode=mode,
                    targets=targets,
                    force=force,
                    wait_timeout=session.fleet.spec.wait.timeout_seconds,
                ),
                accesses,
            )
            if not as_json:
                print_plan(plan, as_json=False, color=color)
            if plan.has_changes and not auto_approve:
                _confirm(mode)
        recorder = StateRecorder(store, state, plan.fleet)
        view: Hook = JsonView() if as_json else HumanProgress(color=color)
        executor = ClusterExecutor(
            plan, clusters, default_timeout=float(session.fleet.spec.wait.timeout_seconds)
        )
        before, after = kill_switches(recorder.flush)  # empty unless test hooks are on (crash tests)
        notice = test_hooks_notice()  # loud, so hooks left on in production are seen
        if notice:
            click.echo(notice, err=True)
        summary = walk_plan(plan, executor, Hooks([*before, recorder, view, *after]), parallelism=parallelism)
    if summary.failures:
        raise ApplyError([_root_cause(o, summary) for o in summary.failures])
    if not as_json:
        add, change, destroy = summary.counts()
        noun = "Destroy" if mode == Mode.DESTROY else "Apply"
        click.echo(f"\n{noun} complete! Resources: {add} added, {change} changed, {destroy} destroyed.")


def _root_cause(failure: Outcome, summary: ApplySummary) -> Diagnostic:
    skipped = [o.step.address for o in summary.skipped if o.root_cause == failure.step.address]
    error = failure.error or Diagnostic("failed", address=str(failure.step.address))
    detail = (
        f" ({len(skipped)} dependent step(s) skipped: {', '.join(map(str, skipped[:5]))})" if skipped else ""
    )
    return Diagnostic(error.summary + detail, address=error.address, hint=error.hint)


def _confirm(mode: Mode) -> None:
    if not sys.stdin.isatty():
        raise PlanError(
            "refusing to change clusters without confirmation: stdin is not a terminal",
            hint="pass --auto-approve, or apply a saved plan file",
        )
    what = "destroy everything this fleet created" if mode == Mode.DESTROY else "perform these actions"
    if (
        click.prompt(f"\nDo you want to {what}? Only 'yes' will be accepted", default="", show_default=False)
        != "yes"
    ):
        raise click.exceptions.Abort()


@click.command("apply")
@click.argument("plan_path", required=False, metavar="[PLANFILE]")
@file_option
@click.option("--auto-approve", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--force",
    is_flag=True,
    help="Let removals through that are otherwise refused (lifecycle.preventDestroy, OCM ManifestWork guard).",
)
@click.option(
    "--parallelism",
    default=DEFAULT_PARALLELISM,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Steps run at the same time on one cluster; clusters proceed independently (64 at most in all).",
)
@click.option(
    "--target", "targets", multiple=True, metavar="ADDR", help="Only this address and its dependencies."
)
@click.option("--json", "as_json", is_flag=True, help="Progress as JSON lines (docs/json-format.md).")
@click.option("--no-color", is_flag=True, help="Never colour output.")
@only_option
def apply(
    plan_path: str | None,
    fleet_file: str,
    auto_approve: bool,
    force: bool,
    parallelism: int,
    targets: tuple[str, ...],
    as_json: bool,
    no_color: bool,
    only: tuple[str, ...],
) -> None:
    """Converge the fleet (or apply exactly a saved plan).

    \b
    Examples:
      fleetplan apply                             # plan, ask, apply
      fleetplan apply fleet.plan                  # exactly a saved plan, no question
      fleetplan apply --auto-approve --no-color   # CI
      fleetplan apply --auto-approve --json        # JSON lines
    """
    if as_json and not plan_path and not auto_approve:
        raise PlanError("apply --json cannot ask for confirmation", hint="pass --auto-approve or a plan file")
    run_apply(
        Session.open(fleet_file, only),
        plan_path,
        mode=Mode.NORMAL,
        auto_approve=auto_approve,
        parallelism=parallelism,
        as_json=as_json,
        color=color_enabled(no_color),
        force=force,
        targets=targets,
    )


@click.command("destroy")
@file_option
@click.option("--auto-approve", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Also destroy what lifecycle.preventDestroy protects.")
@click.option("--parallelism", default=DEFAULT_PARALLELISM, show_default=True, type=click.IntRange(1, 256),
              help="Steps run at the same time on one cluster; clusters proceed independently.")
@click.option("--json", "as_json", is_flag=True, help="Progress as JSON lines.")
@click.option("--no-color", is_flag=True, help="Never colour output.")
@only_option
def destroy(
    fleet_file: str,
    auto_approve: bool,
    force: bool,
    parallelism: int,
    as_json: bool,
    no_color: bool,
    only: tuple[str, ...],
) -> None:
    """Delete everything this fleet created, dependents first, waiting until each is gone.

    \b
    Examples:
      fleetplan plan --destroy                    # preview first
      fleetplan destroy
      fleetplan destroy --auto-approve
    """
    if as_json and not auto_approve:
        raise PlanError("destroy --json cannot ask for confirmation", hint="pass --auto-approve")
    run_apply(
        Session.open(fleet_file, only),
        None,
        mode=Mode.DESTROY,
        auto_approve=auto_approve,
        parallelism=parallelism,
        as_json=as_json,
        color=color_enabled(no_color),
        force=force,
    )
