"""Fixtures for netem tests: root detection, test run ids, and a session-wide cleanup.

Every topology a test creates uses a run id starting with ``tq``, so its namespaces are
``pddbtq…``; the autouse session fixture removes all of them at the end, whatever failed.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator

import pytest

TEST_PREFIX = "pddbtq"


def _can_emulate() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("iptables") is None:
        return "needs iptables (apt-get install -y iptables)"
    return None


SKIP_REASON = _can_emulate()
needs_root = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def new_test_run_id() -> str:
    return "tq" + secrets.token_hex(2)


@pytest.fixture(scope="session", autouse=True)
def _remove_test_namespaces() -> Iterator[None]:
    yield
    if SKIP_REASON is None:
        from pddbench.netem.cleanup import cleanup

        cleanup(TEST_PREFIX)


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = new_test_run_id()
    yield rid
    if SKIP_REASON is None:
        from pddbench.netem.cleanup import cleanup

        cleanup(rid)
