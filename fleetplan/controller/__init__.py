"""Controller mode: `fleetplan controller` keeps `Fleet` custom resources in a management cluster
converged with the same plan and apply engine as the CLI.

    running      leader election (a Lease), the watch, the key queue and periodic resyncs
    reconciling  one reconcile of one Fleet: kubeconfig Secrets, plan, apply, status, teardown
    statuses     conditions and the last plan's summary, as pure functions
    logs         JSON-lines event log (never secret values)

Layering: above `apply`, below `cli`; never imports click.
"""
