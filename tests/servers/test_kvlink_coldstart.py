"""Slow-start compensation in the KV sender: a cold peer waits the modelled missing time
before the first byte, a warm one (used, or pre-warmed) does not. Real aiohttp, loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from pddbench.netem.slowstart import Compensation, PathModel, missing_s
from pddbench.servers import kvlink
from pddbench.servers.kvlink import KvSender

from .helpers import kv_receiver

MODELLED = 100 * 46_490  # a 100-token KV handoff (pdd-flagship-1t)
RATE, RTT, SCALE = 1.25e8, 0.03, 20.0  # 1 Gbit/s, 2 x 15 ms, at 1/20


@pytest.fixture
def installed() -> Iterator[Compensation]:
    comp = Compensation(SCALE, False, {"127.0.0.1": PathModel(RTT, RATE)}, {})
    kvlink._COMPENSATION[:] = [comp]
    yield comp
    kvlink._COMPENSATION.clear()


async def _transfers(n: int) -> list[tuple[kvlink.KvResult, float]]:
    """``n`` KV transfers in a row to one loopback receiver: (result, compensation waited)."""
    out = []
    async with kv_receiver() as target, aiohttp.ClientSession() as http:
        for i in range(n):
            sender = KvSender(
                http,
                target,
                rid=f"r{i}",
                source="p0",
                prompt_len=100,
                kv_bytes_per_token=46_490,
                byte_scale=1 / SCALE,
            )
            sender.available(100)
            out.append((await sender.run(), sender.compensated_s))
    return out


def test_the_first_transfer_to_a_peer_waits_the_missing_slow_start_and_the_next_does_not(
    installed: Compensation,
) -> None:
    (first, w1), (second, w2) = asyncio.run(_transfers(2))
    wait = missing_s(MODELLED, RATE, RTT, SCALE)
    assert 0.1 < wait < 0.15 and (w1, w2) == (wait, 0.0)
    assert first.first_byte - first.start >= wait
    assert second.first_byte - second.start < wait
    assert "127.0.0.1" in installed.last_used


def test_without_compensation_nothing_waits() -> None:
    kvlink._COMPENSATION[:] = [None]
    try:
        ((only, waited),) = asyncio.run(_transfers(1))
    finally:
        kvlink._COMPENSATION.clear()
    assert waited == 0.0
    assert only.first_byte - only.start < missing_s(MODELLED, RATE, RTT, SCALE)
