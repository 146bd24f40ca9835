"""Helpers for the lab's own tests: polling and asking the API server who we are."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = 90.0, interval: float = 0.5) -> T:
    """Poll `probe` until it returns something truthy; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def whoami(api: Any) -> tuple[str, list[str]]:
    """(username, groups) the API server authenticated `api` as, via SelfSubjectReview."""
    from kubernetes import client

    review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
    info = review.status.user_info
    return info.username, list(info.groups or [])
