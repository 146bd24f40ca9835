"""The two planning shortcuts that keep large plans cheap give the same answers as the long way.

- `diff_values({}, after)` (every create's listing) is computed without DeepDiff; compared here
  with DeepDiff's own result on generated values, sensitive and ignored paths included.
- A converged object skips its server-side dry-run only when the state's applied hash, the uid
  and every desired value match what is live; any difference falls back to the dry-run.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.diff import comparing
from fleetplan.plan import bodies, deciding
from fleetplan.state.model import ResourceRecord

_keys = st.sampled_from(["metadata", "data", "spec", "status", "kind", "rules", "a", "b"])
_leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4))
_values = st.recursive(_leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(_keys, inner, max_size=3)), max_leaves=8)
_paths = st.lists(st.sampled_from(["data", "spec", "spec.x", "metadata", "rules", "b"]), max_size=2)


@settings(max_examples=500, deadline=None)
@given(after=st.dictionaries(_keys, _values, max_size=5), sensitive=_paths, ignored=_paths)
def test_additions_match_deepdiff(after: dict[str, Any], sensitive: list[str], ignored: list[str]) -> None:
    fast = comparing.diff_values({}, after, sensitive_paths=sensitive, ignore_paths=ignored)
    slow = _through_deepdiff(after, sensitive, ignored)
    assert fast == slow


def _through_deepdiff(after: dict[str, Any], sensitive: list[str], ignored: list[str]) -> Any:
    mapping = comparing.Mapping  # type: ignore[attr-defined]

    class Nothing:  # no value is an instance: the shortcut's condition is false
        pass

    comparing.Mapping = Nothing  # type: ignore[attr-defined,misc]
    try:
        return comparing.diff_values({}, after, sensitive_paths=sensitive, ignore_paths=ignored)
    finally:
        comparing.Mapping = mapping  # type: ignore[attr-defined]


BODY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "labels": {"x": "1"}},
        "data": {"color": "blue"}, "list": [{"name": "a"}]}
LIVE = {**BODY, "metadata": {**BODY["metadata"], "uid": "u1", "resourceVersion": "9"},
        "list": [{"name": "a", "defaulted": True}]}


def _record(body: dict[str, Any] = BODY, uid: str | None = "u1") -> ResourceRecord:
    return ResourceRecord(address=None, api_version="v1", uid=uid, applied_hash=bodies.body_hash(body))  # type: ignore[arg-type]


def _skips(body: dict[str, Any], live: dict[str, Any], record: ResourceRecord | None, unknown: Any = ()) -> bool:
    return deciding._unchanged_since_apply(body, bodies.body_hash(body), live, record, dict(unknown))


def test_converged_object_skips_the_dry_run() -> None:
    assert _skips(BODY, LIVE, _record())


@pytest.mark.parametrize("case", ["no record", "config changed", "recreated", "drifted", "removed field",
                                  "longer list", "type differs", "value known after apply"])
def test_anything_else_takes_the_dry_run(case: str) -> None:
    body, live, record, unknown = dict(BODY), dict(LIVE), _record(), {}
    if case == "no record":
        record = None
    elif case == "config changed":
        body = {**BODY, "data": {"color": "green"}}
    elif case == "recreated":
        record = _record(uid="u0")
    elif case == "drifted":
        live = {**LIVE, "data": {"color": "red"}}
    elif case == "removed field":
        live = {k: v for k, v in LIVE.items() if k != "data"}
    elif case == "longer list":
        live = {**LIVE, "list": [{"name": "a"}, {"name": "b"}]}
    elif case == "type differs":
        live = {**LIVE, "data": {"color": 1}}
    elif case == "value known after apply":
        unknown = {"data.color": object()}
    if case == "config changed":
        record = _record(BODY)
    assert not _skips(body, live, record, unknown)
