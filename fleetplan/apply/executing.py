"""How one plan step touches a cluster: resolve values known only now, call the handler, retry.

Invariants:
- Values a step needs from other steps (`Ref`s, `Template`s) are resolved from results of this run,
  kept in memory only; a source that did not run is read back if its handler can
  (`outputs_readable`), otherwise the plan was wrong and the step fails naming the source.
- Transient failures (`TransientClusterError`: 409, 429, 5xx, dropped connections) are retried
  within `retries` attempts and the step's deadline (its readiness timeout, counted from the
  step's start), each delay by `clusters.retry_delay`: Retry-After or backoff, never past the
  deadline. Handlers raise transient errors only from writes (their readiness waits ride them out),
  so a retry repeats the write and never restarts a wait; a retried attempt gets only the time
  left. Every handler operation is idempotent (server-side apply, delete-if-present,
  mint-a-token), so a retry after an unknown outcome is safe.
- `refresh-only` plans never write to a cluster.
- An `UNKNOWN` step (its cluster could not be read when planning) fails at once with the reason
  and touches nothing; the walker skips its dependents.
- A step on a cluster the caller did not connect (one that left the fleet; the plan recorded how to
  reach it in `plan.clusters`) gets a connection made from that record, once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from fleetplan.addrs import Address
from fleetplan.errors import ApplyError, ClusterError
from fleetplan.live import handlers
from fleetplan.live.clusters import Cluster, KubeCluster, TransientClusterError, retry_delay
from fleetplan.plan import bodies, unknowns
from fleetplan.plan.model import Action, Mode, Plan, Step
from fleetplan.stacks.desired import Ref, Template

Progress = Callable[[str], None]


class ClusterExecutor:
    def __init__(
        self,
        plan: Plan,
        clusters: Mapping[str, Cluster],
        *,
        default_timeout: float = 300.0,
        retries: int = 6,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plan = plan
        self._steps = {s.address: s for s in plan.steps}
        self._clusters = clusters
        self._default_timeout = default_timeout
        self._retries = retries
        self._backoff = backoff
        self._sleep = sleep
        self._clock = clock
        self._results: dict[Address, handlers.Result] = {}
        self._extra: dict[str, Cluster] = {}  # connections made here from `plan.clusters`
        self._lock = threading.Lock()

    def execute(self, step: Step, progress: Progress) -> handlers.Result:
        if step.action == Action.UNKNOWN:  # its cluster could not be read when planning
            raise ClusterError(
                str(step.options.get(unknowns.REASON_OPTION) or step.reason),
                hint="nothing was changed on that cluster; make it reachable and apply again",
            )
        if step.action == Action.NOOP or self._plan.mode == Mode.REFRESH_ONLY:
            return handlers.Result(uid=step.live_uid)
        if step.action == Action.DELETE and step.options.get("forget"):
            return handlers.Result()
        cluster = self._cluster(step.address)
        handler = handlers.lookup(step.handler)
        timeout = step.readiness.timeout_seconds or self._default_timeout
        body = self._resolve(step, self._clock() + timeout) if step.body is not None else None

        def attempt(operation: Callable[[handlers.Work], Any]) -> Any:
            """Run one handler operation within `timeout`; a retried attempt gets only the time left."""
            deadline = self._clock() + timeout

            def once() -> Any:
                return operation(
                    handlers.Work(
                        address=step.address,
                        api_version=step.api_version,
                        body=body,
                        options=step.options,
                        readiness=step.readiness,
                        timeout=max(1.0, deadline - self._clock()),
                        live_uid=step.live_uid,
                    )
                )

            return self._retrying(once, progress, deadline)

        if step.action in (Action.DELETE, Action.REPLACE):
            attempt(lambda work: handler.remove(cluster, work, progress))
        if step.action == Action.DELETE:
            return handlers.Result()
        result: handlers.Result = attempt(lambda work: handler.converge(cluster, work, progress))
        with self._lock:
            self._results[step.address] = result
        return result

    # -- values known only after apply ---------------------------------------------------------

    def _resolve(self, step: Step, deadline: float) -> Any:
        def resolve(leaf: Ref | Template) -> str:
            if isinstance(leaf, Ref):
                return bodies.transform(self._output(leaf.source, leaf.output, step, deadline), leaf.transform)
            values = {
                name: bodies.transform(self._output(ref.source, ref.output, step, deadline), ref.transform)
                for name, ref in leaf.refs
            }
            return bodies.transform(leaf.render(values), leaf.transform)

        return bodies.substitute(step.body, resolve)

    def _output(self, source: Address, name: str, consumer: Step, deadline: float) -> str:
        with self._lock:
            result = self._results.get(source)
        if result is None:
            src = self._steps.get(source)
            handler = handlers.lookup(src.handler) if src else None
            if src is None or handler is None or not handler.outputs_readable:
                raise ApplyError(
                    f"{consumer.address} needs output {name!r} of {source}, which did not run "
                    "in this apply and cannot be read back",
                    address=str(consumer.address),
                    hint="run `fleetplan plan` again",
                )
            work = handlers.Work(address=source, api_version=src.api_version, body=None, options=src.options)
            result = self._retrying(lambda: handler.read(self._cluster(source), work), lambda _: None, deadline)
            with self._lock:
                self._results[source] = result
        for bag in (result.secrets, result.outputs):
            if name in bag:
                return str(bag[name])
        found = bodies.lookup(result.obj or {}, name)
        if found is None:
            raise ApplyError(
                f"{source} has no output {name!r} (needed by {consumer.address})",
                address=str(consumer.address),
            )
        return str(found)

    # -- plumbing ------------------------------------------------------------------------------

    def _cluster(self, address: Address) -> Cluster:
        name = address.cluster
        with self._lock:
            found = self._clusters.get(name) or self._extra.get(name)
            if found is None and name in self._plan.clusters:
                found = self._extra[name] = KubeCluster(self._plan.clusters[name])
        if found is None:
            raise ApplyError(f"no connection for cluster {name}", address=str(address))
        return found

    def _retrying(self, operation: Callable[[], Any], progress: Progress, deadline: float) -> Any:
        attempt = 0
        while True:
            try:
                return operation()
            except TransientClusterError as err:
                attempt += 1
                delay = retry_delay(err, attempt, remaining=deadline - self._clock(), backoff=self._backoff)
                if attempt >= self._retries or delay is None:
                    raise
                progress(f"retrying in {delay:.1f}s after: {err.diagnostics[0].summary}")
                self._sleep(delay)
