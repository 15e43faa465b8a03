"""Waiting on conditions in tests (never a fixed sleep as synchronisation).

``wait_until`` / ``await_until`` poll ``condition`` every ``interval_s`` until it holds
and fail the test with ``what`` when ``timeout_s`` passes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], *, what: str, timeout_s: float = 10.0, interval_s: float = 0.01
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


async def await_until(
    condition: Callable[[], object], *, what: str, timeout_s: float = 10.0, interval_s: float = 0.01
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)
