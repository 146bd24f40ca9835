"""The shared test kit: scaffolding every suite uses instead of repeating it.

- `kit.netguard`: refuses connections from the test process to anything but this machine.
- `kit.fleets`: the environment a spawned `fleetplan` CLI gets, and `stack: none` fleets of the
  generic `resources` stack over lab clusters, written to a directory and driven through the CLI.

`tests/` is on `sys.path` during a pytest run (pytest inserts the directory of the rootless
`tests/conftest.py`), so suites import it as `from kit.fleets import ...`.
"""
