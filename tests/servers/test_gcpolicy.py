"""The server processes' GC policy: no automatic full collection, one when idle after work."""

from __future__ import annotations

import asyncio
import gc

from pddbench.servers.gcpolicy import QuietGc
from tests.waiting import await_until


def test_quiet_gc_stops_automatic_full_collections_and_restores_on_stop() -> None:
    before = gc.get_threshold()

    async def run() -> tuple[tuple[int, int, int], int]:
        q = QuietGc(lambda: False, interval_s=60)
        q.start()
        try:
            return gc.get_threshold(), gc.get_freeze_count()
        finally:
            q.stop()

    during, frozen = asyncio.run(run())
    assert during[:2] == before[:2] and during[2] >= 1 << 30
    assert frozen > 0  # start-up objects are out of every later collection
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_quiet_gc_collects_once_per_idle_period_after_work() -> None:
    busy = [True]
    checks = [0]  # how often the sweeper asked whether the server is idle

    def idle() -> bool:
        checks[0] += 1
        return not busy[0]

    async def checked(more: int) -> None:
        target = checks[0] + more
        await await_until(lambda: checks[0] >= target, what=f"{more} idle checks")

    async def run() -> list[int]:
        q = QuietGc(idle, interval_s=0.01)
        q.start()
        seen = []
        try:
            await checked(5)
            seen.append(q.full_collections)  # busy: none
            busy[0] = False
            await await_until(lambda: q.full_collections >= 1, what="a full collection")
            seen.append(q.full_collections)  # idle after work: exactly one
            await checked(5)
            seen.append(q.full_collections)  # still idle, nothing new ran: still one
        finally:
            q.stop()
        return seen

    assert asyncio.run(run()) == [0, 1, 1]
