"""The README's main job: a 3-cluster lab, a fleet written by `init`, plan, apply, plan again.

    python -m fleetplan.lab.demo [--stack antrea|ocm] [--dir .lab] [--down]

Every fleetplan step runs as the `fleetplan` command a user would type (a subprocess), so the demo
shows exactly what users see. The Antrea and OCM agents cannot run here; their stand-ins from
`fleetplan.lab.simulators` run in this process while the commands run, and every line they print
says "simulation". The lab is reused when one is already up in the directory and left running at
the end (stop it with `fleetplan lab down`), unless `--down` is given.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetplan.errors import FleetplanError, LabError
from fleetplan.lab.lifecycle import down, up, wait_until_up
from fleetplan.lab.state import Lab, LabCluster, default_dir

VERSIONS = {"antrea": "v2.7.0", "ocm": "v1.3.1"}
ANTREA_LEADER_NAMESPACE = "antrea-multicluster"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def ensure_lab(lab_dir: Path) -> Lab:
    """Reuse a running lab of 3+ clusters in `lab_dir`, or start one."""
    found = wait_until_up(lab_dir, timeout=30)
    if found is not None and found.up and len(found.lab.clusters) >= 3:
        say(f"reusing the lab in {lab_dir} ({', '.join(c.name for c in found.lab.clusters)})")
        return found.lab
    if found is not None:
        down(lab_dir)
    say("starting a lab of 3 real control planes (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    started = time.monotonic()
    lab = up(3, "c", lab_dir)
    say(f"lab up in {time.monotonic() - started:.0f}s")
    return lab


class Simulations:
    """Background stand-ins for the stack's agents, started before apply and stopped at the end."""

    def __init__(self) -> None:
        self._running: list[Any] = []
        self._threads: list[threading.Thread] = []

    def start(self, label: str, make: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self._running.append(make())
            except FleetplanError as err:
                print(f"simulation[{label}]: could not start: {err}", flush=True)

        thread = threading.Thread(target=run, name=f"simulation {label}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        for sim in self._running:
            sim.stop()


def start_simulations(stack: str, lab: Lab, sims: Simulations) -> None:
    leader, members = lab.clusters[0], lab.clusters[1:3]
    if stack == "antrea":
        from fleetplan.lab.simulators import antrea

        def controller(cluster: LabCluster, namespace: str, role: str) -> Callable[[], Any]:
            return lambda: antrea.ControllerSimulation(cluster, namespace, role).start(timeout=600)

        def agent(cluster: LabCluster) -> Callable[[], Any]:
            return lambda: antrea.MemberAgentSimulation(cluster).start()

        sims.start(f"antrea-mc-controller leader {leader.name}", controller(leader, ANTREA_LEADER_NAMESPACE, "leader"))
        for member in members:
            sims.start(f"antrea-mc-controller member {member.name}", controller(member, "kube-system", "member"))
            sims.start(f"antrea member agent {member.name}", agent(member))
    else:
        from fleetplan.lab.simulators import ocm

        def registration(cluster: LabCluster) -> Callable[[], Any]:
            return lambda: ocm.RegistrationAgentSimulation(cluster).start()

        sims.start(f"ocm cluster-manager {leader.name}",
                   lambda: ocm.HubOperatorSimulation(leader, VERSIONS["ocm"]).start())
        for member in members:
            sims.start(f"ocm registration agent {member.name}", registration(member))


def fleetplan(*args: str, ok: tuple[int, ...] = (0,)) -> int:
    """Run `fleetplan ARGS` as a user would, echoing the command; fail on an unexpected exit code."""
    print(f"\n$ fleetplan {' '.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "fleetplan", "--no-color", *args])
    if code not in ok:
        raise LabError(f"`fleetplan {' '.join(args)}` exited {code}", hint="the output above says why")
    return code


def run(stack: str, lab_dir: Path, stop_lab: bool) -> None:
    os.environ.setdefault("FLEETPLAN_MIRROR", str((Path(__file__).parents[2] / ".." / "shared" / "upstream")
                                                  .resolve()))
    lab = ensure_lab(lab_dir)
    work = lab_dir / "demo"
    work.mkdir(parents=True, exist_ok=True)
    fleet = work / "fleet.yaml"
    names = ",".join(c.name for c in lab.clusters[:3])
    sims = Simulations()
    start_simulations(stack, lab, sims)
    try:
        fleetplan("init", "--contexts", names, "--kubeconfig", str(lab.kubeconfig), "--leader", lab.clusters[0].name,
                  "--stack", stack, "--name", "demo", "-o", str(fleet), "--force")
        fleetplan("validate", "-f", str(fleet))
        fleetplan("plan", "-f", str(fleet))
        fleetplan("apply", "-f", str(fleet), "--auto-approve")
        fleetplan("plan", "-f", str(fleet), "--detailed-exitcode")
    finally:
        sims.stop()
        if stop_lab:
            down(lab_dir)
    say("done: the fleet converged and a second plan found no changes")
    print(f"""
Try next:
  export KUBECONFIG={lab.kubeconfig}
  fleetplan plan -f {fleet}          # no changes
  fleetplan graph -f {fleet}         # the dependency graph
  fleetplan state list -f {fleet}    # what fleetplan manages
  fleetplan destroy -f {fleet}       # tear it down again
  fleetplan lab down --dir {lab_dir}
""" if not stop_lab else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fleetplan.lab.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=sorted(VERSIONS), default=os.environ.get("FLEETPLAN_DEMO_STACK", "antrea"))
    parser.add_argument("--dir", type=Path, default=None,
                        help="the lab directory (default: $FLEETPLAN_LAB_DIR or ./.lab)")
    parser.add_argument("--down", action="store_true", help="stop the lab at the end")
    args = parser.parse_args(argv)
    lab_dir = (args.dir or default_dir()).absolute()
    try:
        run(args.stack, lab_dir, args.down)
    except FleetplanError as err:
        for diag in err.diagnostics:
            print(diag.render(), file=sys.stderr)
        sys.exit(int(err.exit_code))


if __name__ == "__main__":
    main()
