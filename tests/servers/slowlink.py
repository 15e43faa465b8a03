"""Test support: a userspace TCP forwarder that adds delay and a rate limit (a stand-in WAN).

Not an emulator for numbers (NETWORK.md: a relay hides the handshake, slow start and
socket-buffer limits — use ``pddbench.netem`` for measurements). It exists so tests and the
servers' benchmark can make one instance's traffic slow on loopback, e.g. to make MD's KV
land after RLD has produced tokens.

Each direction is one link of ``rate_bytes_per_s`` shared fairly by the connections that
have data queued (round robin in pieces of ``PIECE`` bytes, like flows sharing a bottleneck),
followed by a fixed ``delay_s``. Order within a connection is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

PIECE = 4096


class _Flow:
    """One connection in one direction: bytes waiting for the link, then for the delay."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.waiting: deque[bytes] = deque()
        self.in_flight: deque[tuple[float, bytes]] = deque()
        self.wake = asyncio.Event()
        self.eof = False
        self.bytes = 0


class _Link:
    def __init__(self, rate: float | None, delay: float) -> None:
        self.rate = rate
        self.delay = delay
        self.active: deque[_Flow] = deque()
        self.more = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def offer(self, flow: _Flow, data: bytes) -> None:
        flow.bytes += len(data)
        if not self.rate:
            flow.in_flight.append((time.monotonic() + self.delay, data))
            flow.wake.set()
            return
        if not flow.waiting:
            self.active.append(flow)
        for i in range(0, len(data), PIECE):
            flow.waiting.append(data[i : i + PIECE])
        self.more.set()
        if self.task is None:
            self.task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        assert self.rate
        t = time.monotonic()
        while True:
            while not self.active:
                self.more.clear()
                await self.more.wait()
                t = max(t, time.monotonic())
            flow = self.active.popleft()
            piece = flow.waiting.popleft()
            if flow.waiting:
                self.active.append(flow)
            t = max(t, time.monotonic()) + len(piece) / self.rate
            wait = t - time.monotonic()
            if wait > 0.002:
                await asyncio.sleep(wait)
            flow.in_flight.append((t + self.delay, piece))
            flow.wake.set()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


class WanLink:
    """One two-way link that several forwarders (several destinations) share."""

    def __init__(self, rate_bytes_per_s: float | None = None, delay_s: float = 0.0) -> None:
        self.forward = _Link(rate_bytes_per_s, delay_s)
        self.backward = _Link(rate_bytes_per_s, delay_s)

    def stop(self) -> None:
        self.forward.stop()
        self.backward.stop()


class SlowLink:
    """Listens on ``listen_host`` (a free port) and forwards every connection to ``target``.

    The link is its own unless ``wan`` is given, in which case it shares that one.
    """

    def __init__(
        self,
        target: str,
        *,
        rate_bytes_per_s: float | None = None,
        delay_s: float = 0.0,
        listen_host: str = "127.0.0.1",
        wan: WanLink | None = None,
    ) -> None:
        self.target = target
        self.wan = wan or WanLink(rate_bytes_per_s, delay_s)
        self.forward = self.wan.forward
        self.backward = self.wan.backward
        self.listen_host = listen_host
        self.server: asyncio.Server | None = None
        self.address = ""
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: list[tuple[_Flow, _Flow]] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, self.listen_host, 0, backlog=1024)
        port = self.server.sockets[0].getsockname()[1]
        self.address = f"{self.listen_host}:{port}"
        return self.address

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        self.wan.stop()
        for fwd, back in self._conns:
            fwd.writer.close()
            back.writer.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def blackhole(self) -> None:
        """From now on nothing gets through, and nothing is closed (an unreachable peer)."""
        self.forward.delay = self.backward.delay = 1e9
        for fwd, back in self._conns:
            for flow in (fwd, back):
                flow.in_flight = deque((t + 1e9, d) for t, d in flow.in_flight)

    def cut_busiest(self) -> int:
        """Abort the connection that carried the most bytes forward; returns its byte count."""
        fwd, back = max(self._conns, key=lambda c: c[0].bytes)
        fwd.writer.transport.abort()
        back.writer.transport.abort()
        return fwd.bytes

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        host, _, port = self.target.rpartition(":")
        try:
            sr, sw = await asyncio.open_connection(host, int(port))
        except OSError:
            cw.close()
            return
        fwd, back = _Flow(sw), _Flow(cw)
        self._conns.append((fwd, back))
        for coro in (
            self._read(cr, fwd, self.forward),
            self._read(sr, back, self.backward),
            self._write(fwd),
            self._write(back),
        ):
            task = asyncio.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _read(self, reader: asyncio.StreamReader, flow: _Flow, link: _Link) -> None:
        try:
            while data := await reader.read(65536):
                link.offer(flow, data)
        except (ConnectionError, OSError):
            pass
        flow.eof = True
        flow.wake.set()

    async def _write(self, flow: _Flow) -> None:
        try:
            while True:
                while not flow.in_flight:
                    if flow.eof and not flow.waiting:
                        return
                    flow.wake.clear()
                    await flow.wake.wait()
                due, data = flow.in_flight.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                flow.writer.write(data)
                await flow.writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                flow.writer.close()
