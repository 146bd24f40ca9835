"""Render the reliability suite's last-run data (`last-run.json`) as `docs/reliability.md`.

Pure: a function of the data only, so the document changes only when the figures do.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

HEADER = """\
# Reliability and security: figures from the last run

This file is written by the reliability suite (`tests/reliability/`, the session-finish hook in
its `conftest.py`, data in `tests/reliability/last-run.json`); do not edit it by hand. Each
section says when its figures were produced and whether that run was CI-sized or full.

Run it: `python3 -m pytest tests/reliability` (CI-sized) or
`FLEETPLAN_FULL=1 python3 -m pytest tests/reliability` (every step boundary of the `resources`
fleet in apply and destroy, all three kill-point kinds on the Antrea and OCM fleets, extra fault
mixes, 10,000 fleet.yaml fuzz cases). Against a running lab: `FLEETPLAN_LAB_DIR=<dir>`;
otherwise the suite starts its own 3 clusters. Everything runs on loopback.

What is exercised, and how:

1. **Crash and resume.** Real `fleetplan apply` / `destroy` subprocesses are SIGKILLed at exact
   step boundaries through the engine's test kill switch (`FLEETPLAN_TEST_KILL_AT=<point>:<n>`,
   `fleetplan/apply/killing.py`: `start` = intent journaled, side effect not done; `unrecorded` =
   side effect done, state not yet updated; `finish` = state updated) and at random instants
   inside the walk. The next run must exit 0 and leave: the owned objects on the clusters exactly
   the clean-apply set (no duplicates, no orphans), the state recording exactly those with their
   live uids, no journal entry, no lock, and a plan with no changes; after destroy, nothing.
   Stacks: the generic `resources` fleet (3 clusters, 18 objects), the Antrea fleet (leader +
   2 members) and the OCM fleet (hub + 2 spokes), the last two with their agent simulations.
2. **API faults** through `fleetplan/lab/proxy.py` (TCP splice for latency/resets/refusal;
   HTTPS-terminating with the cluster's own CA for 429 + Retry-After, 500, 503).
3. **Concurrency**: a second apply while one runs; the lock of a SIGKILLed run; a lock from
   another host and `force-unlock`; stale saved plans (first-run replay, older serial, changed clusters).
4. **Damaged state files**: every command that reads the state, on ten kinds of damage.
5. **Hostile input**: hypothesis-generated fleet.yaml files through `fleetplan validate`, and
   hostile kubeconfigs through `fleetplan plan`.
6. **Secret hygiene**: every command on an Antrea fleet with per-member tokens, including
   `--debug`, `--json`, a failing run that rotates tokens, and `join-config export`.
7. **Least privilege**: TokenReview + SubjectAccessReview of each delivered credential.

The way back from a damaged state file: every write keeps the previous state as
`<state>.backup` next to it; `cp state/<fleet>.json.backup state/<fleet>.json`, then `fleetplan plan`
(the plan re-reads the clusters, so anything the backup does not record yet is found again by its
ownership label and adopted). A newer format (`format_version` above what this fleetplan reads)
means: upgrade fleetplan. A lock left by a killed run on the same host is taken over with a warning
naming it; a lock held from another host is released with `fleetplan force-unlock ID` (the ID is in
the error).

Known gaps and notes (rows marked **NO** below are failures of the last run):
- A member that cannot be reached is covered both from the start (planning marks its steps unknown
  behind one root step that apply fails) and from the first step on; in both, c1 and c2 converge.
- A kubeconfig whose context names a user that does not exist is sent anonymously (the
  kubernetes client's behaviour); the error is the server's `system:anonymous ... forbidden`.
- The `kubernetes` state backend (Secret + Lease) is not yet covered by the concurrency tests.
"""


def _when(section: dict[str, Any]) -> str:
    run = section.get("run", {})
    size = "full" if run.get("full") else "CI-sized"
    return f"_Last run: {run.get('when', '?')}, {size}._"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _ok(value: Any) -> str:
    return {True: "yes", False: "**NO**", None: "**NO** (failed)"}.get(value, str(value))


def _crash(section: dict[str, Any]) -> str:
    rows = section["rows"]
    tried = [r for r in rows if r["survived"] != "n/a"]
    survived = sum(r["survived"] is True for r in tried)
    stacks = sorted({r["stack"] for r in rows})
    def kind(r: dict[str, Any]) -> tuple[str, str, str]:
        return r["stack"], r["operation"], r["point"].split()[0].rstrip(",")

    by_op = Counter(kind(r) for r in tried)
    ok_by_op = Counter(kind(r) for r in tried if r["survived"] is True)
    summary = _table(["stack", "operation", "kind of kill point", "tried", "survived"],
                     [[s, o, k, n, ok_by_op[(s, o, k)]] for (s, o, k), n in sorted(by_op.items())])
    detail = _table(["stack", "operation", "kill point", "survived"],
                    [[r["stack"], r["operation"], r["point"], _ok(r["survived"])] for r in rows])
    return (f"## 1. Crash and resume (SIGKILL)\n\n{_when(section)}\n\n**Kill points tried: {len(tried)}; "
            f"survived: {survived}.** Stacks covered: {', '.join(stacks)}.\n\n{summary}\n\n"
            f"<details><summary>every kill point</summary>\n\n{detail}\n\n</details>\n")


def _generic(title: str, section: dict[str, Any], headers: list[str], keys: list[str], lead: str = "") -> str:
    rows = [[_ok(r.get(k)) if k == "ok" else r.get(k, "") for k in keys] for r in section["rows"]]
    return f"## {title}\n\n{_when(section)}\n\n{lead}{_table(headers, rows)}\n"


def render(data: dict[str, Any]) -> str:
    cats = data.get("categories", {})
    parts = [HEADER]
    if "crash" in cats:
        parts.append(_crash(cats["crash"]))
    if "faults" in cats:
        rows = cats["faults"]["rows"]
        lead = f"**Faults injected: {sum(_count(r.get('injected')) for r in rows)}; scenarios passed: " \
               f"{sum(r.get('ok') is True for r in rows)} of {len(rows)}.**\n\n"
        parts.append(_generic("2. API faults through the lab proxy", cats["faults"],
                              ["scenario", "faults injected", "expected", "outcome", "as expected"],
                              ["scenario", "injected", "expected", "outcome", "ok"], lead))
    if "concurrency" in cats:
        parts.append(_generic("3. Concurrency and locks", cats["concurrency"],
                              ["scenario", "outcome", "as expected"], ["scenario", "outcome", "ok"]))
    if "state" in cats:
        parts.append(_generic("4. Damaged state files", cats["state"],
                              ["damage", "error shown", "state left untouched", "restored from backup", "as expected"],
                              ["damage", "error", "untouched", "restored", "ok"]))
    if "fuzz" in cats:
        rows = cats["fuzz"]["rows"]
        lead = f"**fleet.yaml fuzz cases run: {sum(_count(r.get('cases')) for r in rows)}.**\n\n"
        parts.append(_generic("5a. Hostile fleet.yaml (hypothesis)", cats["fuzz"],
                              ["generator", "cases", "tracebacks", "slowest (s)", "as expected"],
                              ["generator", "cases", "tracebacks", "slowest", "ok"], lead))
    if "kubeconfig" in cats:
        parts.append(_generic("5b. Hostile kubeconfigs", cats["kubeconfig"],
                              ["case", "exit", "seconds", "first error line", "as expected"],
                              ["case", "exit", "seconds", "error", "ok"]))
    if "secrets" in cats:
        rows = cats["secrets"]["rows"]
        lead = (f"**Secret values searched for: {max((_count(r.get('values')) for r in rows), default=0)}; "
                f"artifacts scanned: {sum(_count(r.get('artifacts')) for r in rows)}; "
                f"hits: {sum(_count(r.get('hits')) for r in rows)} (the join files, which must hold a token, are "
                "the scanner's positive control and are not counted).**\n\n")
        parts.append(_generic("6. Secret hygiene", cats["secrets"],
                              ["what was scanned", "artifacts", "secret values", "hits", "as expected"],
                              ["what", "artifacts", "values", "hits", "ok"], lead))
    if "privilege" in cats:
        rows = cats["privilege"]["rows"]
        lead = f"**Access checks: {len(rows)}; as expected: {sum(r.get('ok') is True for r in rows)}.**\n\n"
        parts.append(_generic("7. Least privilege (SubjectAccessReview matrix)", cats["privilege"],
                              ["credential", "verb", "resource", "namespace", "needed", "allowed", "as expected"],
                              ["credential", "verb", "resource", "namespace", "expected", "allowed", "ok"], lead))
    tests = data.get("tests", {})
    if tests:
        parts.append("## Test files\n\n" + _table(
            ["file", "passed", "failed", "skipped", "last run"],
            [[m, t.get("passed", 0), t.get("failed", 0), t.get("skipped", 0), t["run"]["when"]]
             for m, t in sorted(tests.items())]) + "\n")
    return "\n".join(parts)
