"""A pipelined KV sender reports the intervals it had KV to send, not the prefill's stalls."""

from __future__ import annotations

import asyncio

import aiohttp

from pddbench.servers import kvlink
from pddbench.servers.kvlink import KvSender, active_intervals

from .helpers import kv_receiver


def test_active_intervals_leave_out_the_stalls() -> None:
    assert active_intervals(0.0, 10.0, [(1.0, 4.0), (6.0, 9.0)]) == (
        (0.0, 1.0),
        (4.0, 6.0),
        (9.0, 10.0),
    )
    assert active_intervals(0.0, 5.0, []) == ((0.0, 5.0),)
    assert active_intervals(None, 5.0, []) == ()


async def _chunked_transfer(chunks: int, gap_s: float) -> kvlink.KvResult:
    kvlink._COMPENSATION[:] = [None]
    try:
        async with kv_receiver() as target, aiohttp.ClientSession() as http:
            sender = KvSender(
                http,
                target,
                rid="r",
                source="p0",
                prompt_len=1000 * chunks,
                kv_bytes_per_token=1000,
                byte_scale=1.0,
            )
            task = asyncio.create_task(sender.run())
            for k in range(1, chunks + 1):  # the prefill produces one chunk every gap_s
                sender.available(1000 * k)
                await asyncio.sleep(gap_s)
            return await task
    finally:
        kvlink._COMPENSATION.clear()


def test_a_sender_waiting_for_the_prefill_is_not_active() -> None:
    gap = 0.25
    r = asyncio.run(_chunked_transfer(3, gap))
    assert len(r.active) == 3  # one burst per chunk
    active = sum(b - a for a, b in r.active)
    assert r.end - r.first_byte >= 2 * gap * 0.9  # the transfer spans the prefill
    assert active < gap  # 1 MB a chunk on loopback: milliseconds
    assert r.active[0][0] == r.first_byte and r.active[-1][1] == r.end
