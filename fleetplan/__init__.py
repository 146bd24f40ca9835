"""fleetplan: plan, apply and destroy Kubernetes multi-cluster fleets from one fleet.yaml.

The package is layered; each layer imports only downward (checked by import-linter, see
pyproject.toml):

    cli          click commands, views, the single error boundary and exit codes
    apply        the walker: executes a Plan, never reads the config
    plan         immutable Plan of Steps, plan files
    diff/live/state   desired-vs-live comparison, cluster access, the state store
    stacks       antrea, ocm, resources: Fleet -> desired resources (pure)
    graph/config the dependency DAG; the fleet.yaml models and loader
    addrs        the one identity type
    errors       the exception root and diagnostics

`lab` stands beside the engine: it runs real local control planes for tests and the demo.
"""

__version__ = "0.1.0"
