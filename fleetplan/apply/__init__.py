"""Executing a plan: the walker (`walking`), how one step touches a cluster (`executing`), and the
hooks through which progress is reported and state is recorded (`hooks`, `recording`).

The walker never reads the config and never prints: it does what the plan says and tells hooks.
"""
