"""KV-cache transfer between instances over real TCP connections (HTTP/1.1 chunked POST).

Owns the bytes on the wire: a :class:`KvSender` streams the KV of one request's prompt
suffix to one receiver *as the prefill produces it* (pipelined: after each chunk the bytes
of the newly computed tokens are released), and :func:`receive_kv` counts them on the other
side. Payload size is ``modelled KV bytes × byte_scale`` (the emulation byte scale), the
content is zeros; whatever link lies between the two addresses decides how long it takes.
Start (the POST), first byte on the wire, end (the receiver's answer), sizes and the
sender's *active* intervals (first byte → end, less the stalls in which it had sent all the
KV the prefill had produced so far: time the prefill, not the link, held it up) are
measured, never computed.

Slow-start compensation (``[network] cold_start_compensation``, scaled runs): a sender
whose connection to the peer is cold waits the slow-start time byte scaling removed
(:func:`compensation`, :mod:`pddbench.netem.slowstart`) before its first byte.

A receiver that gets fewer bytes than announced (connection cut, sender died) reports a
broken transfer; a sender whose POST fails reports it too. Must not decide routing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from pddbench.netem.slowstart import COMPENSATION_ENV, Compensation
from pddbench.servers import protocol as proto

_ZEROS = memoryview(bytes(1 << 20))
_PIECE = 1 << 20


class KvTransferError(Exception):
    """A KV transfer that did not complete (one clear message)."""


@dataclass(frozen=True)
class KvResult:
    to: str
    path: str
    start: float
    end: float
    bytes: int
    modelled_bytes: int
    tokens: int
    first_byte: float  # when the first byte went on the wire (start + waiting for the prefill)
    active: tuple[tuple[float, float], ...] = ()  # [first byte, end] less the prefill stalls


def scaled(modelled: float, byte_scale: float) -> int:
    return round(modelled * byte_scale)


_COMPENSATION: list[Compensation | None] = []


def compensation() -> Compensation | None:
    """This process's slow-start compensation (from the environment; None: off)."""
    if not _COMPENSATION:
        _COMPENSATION.append(Compensation.from_env(os.environ.get(COMPENSATION_ENV)))
    return _COMPENSATION[0]


def peer_host(address: str) -> str:
    return address.rsplit(":", 1)[0]


class KvSender:
    """Streams one request's KV suffix to one receiver, pipelined with the prefill."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        target: proto.KvTarget,
        *,
        rid: str,
        source: str,
        prompt_len: int,
        kv_bytes_per_token: int,
        byte_scale: float,
    ) -> None:
        self.http = http
        self.target = target
        self.rid = rid
        self.source = source
        self.skip = min(target.skip_tokens, prompt_len)
        self.prompt_len = prompt_len
        self.kvb = kv_bytes_per_token
        self.scale = byte_scale
        self.tokens = prompt_len - self.skip
        self.modelled_total = self.tokens * kv_bytes_per_token
        self.real_total = scaled(self.modelled_total, byte_scale)
        self._avail = self.skip
        self._more = asyncio.Event()
        self.first_byte: float | None = None
        self._stalls: list[tuple[float, float]] = []  # after the first byte, awaiting the prefill
        self.compensated_s = 0.0  # slow-start compensation waited (cold connection)

    def available(self, computed_tokens: int) -> None:
        """The prefill has the KV of the first ``computed_tokens`` prompt tokens."""
        if computed_tokens > self._avail:
            self._avail = min(computed_tokens, self.prompt_len)
            self._more.set()

    def _real_upto(self, tokens: int) -> int:
        if tokens >= self.prompt_len:
            return self.real_total
        return min(self.real_total, scaled(max(0, tokens - self.skip) * self.kvb, self.scale))

    async def _body(self) -> AsyncIterator[memoryview]:
        sent = 0
        while sent < self.real_total:
            upto = self._real_upto(self._avail)
            if upto <= sent:
                self._more.clear()
                stalled = time.monotonic()
                await self._more.wait()
                if self.first_byte is not None:
                    self._stalls.append((stalled, time.monotonic()))
                continue
            while sent < upto:
                n = min(_PIECE, upto - sent)
                if self.first_byte is None:
                    await self._compensate()
                    self.first_byte = time.monotonic()
                yield _ZEROS[:n]
                sent += n

    async def _compensate(self) -> None:
        comp = compensation()
        if comp is None:
            return
        peer = peer_host(self.target.address)
        self.compensated_s = comp.wait_s(peer, self.modelled_total, time.monotonic())
        # not marked used until it ends: a concurrent sender opens its own (cold) connection
        if self.compensated_s > 0:
            await asyncio.sleep(self.compensated_s)

    async def run(self) -> KvResult:
        t = self.target
        headers = {
            proto.KV_FROM: self.source,
            proto.KV_BYTES: str(self.real_total),
            proto.KV_MODELLED: str(self.modelled_total),
            proto.KV_TOKENS: str(self.tokens),
            proto.KV_PATH: t.path,
            proto.KV_MODE: t.mode,
            "Content-Type": "application/octet-stream",
        }
        if t.relay_address:
            headers[proto.KV_RELAY] = t.relay_address
            headers[proto.KV_RELAY_ID] = t.relay_instance or ""
        start = time.monotonic()
        url = f"http://{t.address}/internal/kv/{self.rid}"
        try:
            async with self.http.post(url, data=self._body(), headers=headers) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise KvTransferError(
                        f"KV transfer to {t.instance} ({t.address}) refused: HTTP {resp.status} "
                        f"{text[:200]}"
                    )
        except (aiohttp.ClientError, OSError) as exc:
            raise KvTransferError(
                f"KV transfer to {t.instance} ({t.address}) failed: {type(exc).__name__}: {exc}"
            ) from None
        end = time.monotonic()
        comp = compensation()
        if comp is not None:
            comp.used(peer_host(t.address), end)
        return KvResult(
            to=t.instance,
            path=t.path,
            start=start,
            end=end,
            bytes=self.real_total,
            modelled_bytes=self.modelled_total,
            tokens=self.tokens,
            first_byte=self.first_byte if self.first_byte is not None else end,
            active=active_intervals(self.first_byte, end, self._stalls),
        )


def active_intervals(
    first_byte: float | None, end: float, stalls: list[tuple[float, float]]
) -> tuple[tuple[float, float], ...]:
    """[first_byte, end] less the stalls (sorted, inside it): the time the link had KV to
    carry. Bytes already in the socket buffer still drain during a stall, so this errs short
    by at most a buffer's worth per stall."""
    if first_byte is None or end <= first_byte:
        return ()
    out: list[tuple[float, float]] = []
    at = first_byte
    for a, b in stalls:
        if a > at:
            out.append((at, min(a, end)))
        at = max(at, b)
    if end > at:
        out.append((at, end))
    return tuple(out)


@dataclass(frozen=True)
class KvReceipt:
    source: str
    path: str
    start: float
    end: float
    bytes: int
    modelled_bytes: int
    tokens: int


async def receive_kv(request: web.Request) -> KvReceipt:
    """Read one KV transfer's body to the end; raise KvTransferError if it is cut short."""
    h = request.headers
    source = h.get(proto.KV_FROM, "?")
    try:
        expected = int(h[proto.KV_BYTES])
        modelled = int(h.get(proto.KV_MODELLED, "0"))
        tokens = int(h.get(proto.KV_TOKENS, "0"))
    except (KeyError, ValueError):
        raise KvTransferError(
            f"KV transfer from {source}: missing or bad {proto.KV_BYTES}"
        ) from None
    start = time.monotonic()
    got = 0
    try:
        async for piece in request.content.iter_any():
            got += len(piece)
    except (aiohttp.ClientPayloadError, ConnectionError, asyncio.IncompleteReadError) as exc:
        raise KvTransferError(
            f"KV transfer from {source} broken after {got} of {expected} bytes: "
            f"{type(exc).__name__}"
        ) from None
    if got != expected:
        raise KvTransferError(f"KV transfer from {source} broken after {got} of {expected} bytes")
    return KvReceipt(
        source, h.get(proto.KV_PATH, "?"), start, time.monotonic(), got, modelled, tokens
    )
