"""Fixtures for netem tests: root detection, test run ids, and a session-wide cleanup.

Every topology a test creates uses a run id from ``new_test_run_id`` (``tq…``, namespaces
``pddbtq…``). The autouse session fixture removes, at the end and whatever failed, the
runs *this* session created, plus ``pddbtq`` runs whose owner process is dead and whose
state predates the session (debris of an earlier, killed session) — never a live run,
so two test sessions on one machine cannot tear down each other's topologies.
Emulation needs only root: without netem the userspace delay stage is steered over
netlink (no iptables binary).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator

import pytest

TEST_PREFIX = "pddbtq"
_CREATED: set[str] = set()
_SESSION_START = time.time()


def _can_emulate() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    return None


SKIP_REASON = _can_emulate()
needs_root = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def new_test_run_id() -> str:
    """A fresh ``tq…`` run id, remembered so this session's cleanup removes its runs."""
    rid = "tq" + secrets.token_hex(2)
    _CREATED.add(rid)
    return rid


def stale_test_runs(before: float) -> list[str]:
    """Run ids of ``pddbtq`` runs whose owner is dead and whose state file predates ``before``."""
    from pddbench.netem.state import load_states

    out = []
    for state in load_states():
        if not state.prefix.startswith(TEST_PREFIX) or state.owner_alive():
            continue
        try:
            if os.stat(state.path).st_mtime < before:
                out.append(state.run_id)
        except OSError:
            continue
    return out


@pytest.fixture(scope="session", autouse=True)
def _remove_test_namespaces() -> Iterator[None]:
    yield
    if SKIP_REASON is None:
        from pddbench.netem.cleanup import cleanup

        for rid in sorted(_CREATED | set(stale_test_runs(_SESSION_START))):
            cleanup(rid)


@pytest.fixture
def run_id() -> Iterator[str]:
    rid = new_test_run_id()
    yield rid
    if SKIP_REASON is None:
        from pddbench.netem.cleanup import cleanup

        cleanup(rid)
