"""`fleetplan controller`: run controller mode against a management cluster until stopped.

Without `--kubeconfig` the pod's service account is used (the Helm chart's Deployment). SIGTERM
and SIGINT stop it gracefully (the leader Lease is released); losing leadership exits with 1 so
the supervisor restarts the process as a follower. Events are JSON lines on stderr.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

import click

from fleetplan.config.durations import parse_duration
from fleetplan.errors import ConfigError


def _seconds(text: str, option: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise ConfigError(f"{option} {text!r}: {err}", hint="write a duration like 60s, 5m or 1h") from None


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.is_file() else "fleetplan-system"


@click.command("controller")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Management cluster kubeconfig "
              "(default: the pod's service account).")
@click.option("--context", help="Context in --kubeconfig (default: its current-context).")
@click.option("--namespace", help="Namespace of the leader-election Lease (default: the pod's, else "
              "fleetplan-system).")
@click.option("--watch-namespace", default="", help="Only reconcile Fleets in this namespace (default: all).")
@click.option("--resync", default="60s", show_default=True, help="Re-plan every Fleet this often to correct drift.")
@click.option("--lease-name", default="fleetplan-controller", show_default=True, help="Leader-election Lease.")
@click.option("--lease-duration", default="15s", show_default=True,
              help="How long a leader that stops renewing keeps the Lease.")
@click.option("--manifests-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Relative spec.resources paths resolve here (mount manifests into the pod).")
@click.option("--parallelism", default=10, show_default=True, type=click.IntRange(1, 256))
@click.option("--only", "only", multiple=True, hidden=True, help="Render only these stacks.")
def controller(kubeconfig: str | None, context: str | None, namespace: str | None, watch_namespace: str,
               resync: str, lease_name: str, lease_duration: str, manifests_dir: str, parallelism: int,
               only: tuple[str, ...]) -> None:
    """Reconcile Fleet resources in a management cluster (leader-elected).

    \b
    Examples:
      fleetplan controller                                   # in a pod (see charts/fleetplan)
      fleetplan controller --kubeconfig ~/.kube/mgmt --watch-namespace fleets --resync 5m
    """
    from fleetplan.controller.logs import json_log
    from fleetplan.controller.reconciling import Reconciler, Settings
    from fleetplan.controller.running import Controller, Options
    from fleetplan.live.kubeconfigs import ClusterAccess
    from fleetplan.live.objects import ObjectClient

    duration = _seconds(lease_duration, "--lease-duration")
    api = ObjectClient.connect(ClusterAccess("management", kubeconfig, context) if kubeconfig else None)
    log = json_log()
    settings = Settings(base_dir=Path(manifests_dir).resolve(), only=only, parallelism=parallelism,
                        retry_after=max(1.0, duration / 3))
    options = Options(namespace=namespace or _pod_namespace(), lease_name=lease_name, lease_duration=duration,
                      resync=float(_seconds(resync, "--resync")), watch_namespace=watch_namespace)
    runner = Controller(api, Reconciler(api, settings, log), options, log)

    def stop(signum: int, frame: FrameType | None) -> None:
        log("stopping", signal=signal.Signals(signum).name)
        runner.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.exit(runner.run())
