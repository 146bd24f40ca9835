"""Stacks turn a Fleet into desired resources with explicit dependencies and readiness rules.

`antrea`, `ocm` and the generic `resources` stack are pure: no I/O beyond reading manifest
bundles and files the fleet names, no cluster client. The types they speak are in `desired`.
"""
