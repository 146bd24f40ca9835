"""Desired vs live, on the fields fleetplan manages: the only home of deepdiff.

`comparing.compare` takes the live object and the object a server-side apply dry-run says it would
become, and returns `FieldChange`s restricted to the fields the `fleetplan` field manager owns
(before or after), with sensitive values masked. Pure: no I/O.
"""
