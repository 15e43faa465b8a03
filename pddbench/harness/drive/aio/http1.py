"""A small HTTP/1.1 client for streamed completions: keep-alive pool, bytes stamped on arrival.

Owns the sockets of the asyncio replay engine: one :class:`Http1Pool` per target keeps
idle keep-alive connections, :meth:`Http1Pool.exchange` sends one request (head and
body in one write) and hands every piece of response body to a sink *inside*
``data_received``, with one clock reading per socket read. There is no stream reader, no
task wake-up and no line iterator between the kernel handing the bytes over and the
timestamp, which is what keeps the client's first-token stamp within a fraction of a
millisecond of the server's at hundreds of requests per second on two cores — aiohttp's
reader costs several times more CPU per chunk (see ``bench/bench_client.py``).

Framing (``Content-Length``, ``Transfer-Encoding: chunked`` with trailers,
close-delimited, 1xx) is the sans-IO :class:`~pddbench.harness.drive.framing.ResponseFramer`
that the Locust worker's client shares. A response with status >= 400 is collected (up
to 64 KiB) and returned instead of being given to the sink. When the sink has what it
needs before the message ends (``[DONE]`` before the final zero chunk), the exchange
returns at once and the connection finishes reading the message in the background,
returning to the pool if it ends within :data:`DRAIN_S`; otherwise it is closed.

Failures are exceptions of this module — :class:`ConnectFailed`, :class:`StreamCut`,
:class:`ExchangeTimeout` — for the caller to turn into records. Must not: parse SSE or
JSON, or know about records.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from pddbench.harness.drive.framing import (
    DRAIN_S,
    BodySink,
    ConnectFailed,
    ExchangeTimeout,
    FramingError,
    Reply,
    RequestLimit,
    ResponseFramer,
    StreamCut,
    Target,
    closed_reply,
    connect_failed,
)

__all__ = ["ConnectFailed", "ExchangeTimeout", "Http1Pool", "Reply", "RequestLimit", "StreamCut"]


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    def __init__(self, pool: Http1Pool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.framer = ResponseFramer()
        self.reply: Reply | None = None
        self.sink: BodySink | None = None
        self.clock: Callable[[], float] | None = None
        self.waiter: asyncio.Future[Reply] | None = None
        self.last_rx = 0.0
        self.received_any = False
        self.drain_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self.pool._forget(self)
        try:  # a close-delimited body ends here; anything else was cut
            self._resolve(closed_reply(self.framer, self.reply, f": {exc}" if exc else ""))
        except StreamCut as cut:
            self._fail(cut)

    def data_received(self, data: bytes) -> None:
        now = self.clock() if self.clock is not None else 0.0
        self.last_rx = now
        self.received_any = True
        framer = self.framer
        try:
            body = framer.feed(data)
        except FramingError as exc:
            self._fail(StreamCut(f"malformed HTTP response: {exc}"))
            self.close()
            return
        if self.reply is None and framer.status is not None:
            self.reply = Reply(status=framer.status)
        if body:
            self._deliver(now, body)
        if framer.complete:
            self._message_end()

    def _deliver(self, now: float, data: bytes) -> None:
        reply = self.reply
        if not data or reply is None:
            return
        if reply.status >= 400:
            reply.add_error_body(data)
            return
        sink = self.sink
        if sink is not None and sink.feed(now, data):
            self.sink = None  # satisfied: the rest of the message is drained, not read
            self._resolve(reply)

    def _message_end(self) -> None:
        reply = self.reply
        if reply is not None:
            reply.complete = True
            self._resolve(reply)
        if self.drain_timer is not None:
            self.drain_timer.cancel()
        if self.framer.keep_alive and not self.closed:
            self._reset()
            self.pool._release(self)
        else:
            self.close()

    # -- outcomes ----------------------------------------------------------------------------
    def _resolve(self, reply: Reply) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)

    def _fail(self, exc: Exception) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self.pool._forget(self)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self.pool._forget(self)

    def drain_or_close(self, loop: asyncio.AbstractEventLoop) -> None:
        """The exchange is over but the message is not: finish it quietly, or give up."""
        self.sink = None
        self.waiter = None
        if self.closed:
            return
        if not self.framer.keep_alive:  # close-delimited, or the server said close
            self.abort()
            return
        self.drain_timer = loop.call_later(DRAIN_S, self.abort)


class Http1Pool:
    """Keep-alive connections to one target; each exchange takes an idle one or opens one."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.target = Target.parse(base_url)
        self.connect_timeout_s = connect_timeout_s
        self._ssl = ssl_context or (ssl.create_default_context() if self.target.tls else None)
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self.opened = 0  # connections opened over the pool's life (reported by benchmarks)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self), self.target.host, self.target.port, ssl=self._ssl
                )
        except OSError as exc:  # TimeoutError included
            tcp = self.target.tls and isinstance(exc, TimeoutError) and await self._tcp_answers()
            raise connect_failed(
                exc, self.connect_timeout_s, tls=self.target.tls, tcp_answered=tcp
            ) from exc
        self.opened += 1
        self._all.add(conn)
        return conn

    async def _tcp_answers(self) -> bool:
        """Whether a plain TCP connection to the target opens (after a TLS attempt timed
        out: then the handshake, not the network, is what hung)."""
        try:
            async with asyncio.timeout(min(2.0, self.connect_timeout_s)):
                transport, _ = await asyncio.get_running_loop().create_connection(
                    asyncio.Protocol, self.target.host, self.target.port
                )
        except OSError:
            return False
        transport.close()
        return True

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def _release(self, conn: _Connection) -> None:
        if conn.waiter is None or conn.waiter.done():
            conn.waiter = None
            self._idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    async def exchange(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        sink: BodySink,
        clock: Callable[[], float],
        *,
        stall_timeout_s: float = 120.0,
        total_timeout_s: float = 900.0,
    ) -> Reply:
        """Send one request and feed its body to ``sink`` until the sink or the message ends.

        A keep-alive connection found dead before any byte of the response arrived is
        replaced once, transparently (the server closed it while it sat idle)."""
        head = self.target.request_head(method, path, headers, len(body))
        conn = self._take_idle()
        retry_allowed = conn is not None
        if conn is None:
            conn = await self._connect()
        while True:
            try:
                return await self._exchange_on(
                    conn, head + body, sink, clock, stall_timeout_s, total_timeout_s
                )
            except StreamCut:
                if not (retry_allowed and not conn.received_any):
                    raise
                retry_allowed = False
                conn = await self._connect()

    async def _exchange_on(
        self,
        conn: _Connection,
        wire: bytes,
        sink: BodySink,
        clock: Callable[[], float],
        stall_timeout_s: float,
        total_timeout_s: float,
    ) -> Reply:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Reply] = loop.create_future()
        conn.waiter, conn.sink, conn.clock = waiter, sink, clock
        conn.received_any = False
        assert conn.transport is not None
        conn.transport.write(wire)
        started = conn.last_rx = clock()
        deadline = started + total_timeout_s
        timer: asyncio.TimerHandle | None = None

        def check() -> None:
            nonlocal timer
            now = clock()
            if now >= deadline:
                conn._fail(RequestLimit(f"request ran past {total_timeout_s:g} s"))
            elif now - conn.last_rx >= stall_timeout_s:
                conn._fail(ExchangeTimeout(f"no data for {stall_timeout_s:g} s"))
            else:
                wake = min(deadline, conn.last_rx + stall_timeout_s) - now
                timer = loop.call_later(max(wake, 0.001), check)

        timer = loop.call_later(min(stall_timeout_s, total_timeout_s), check)
        try:
            reply = await waiter
        except BaseException:
            if conn.waiter is waiter:  # still ours (not finished and handed to another)
                conn.abort()
            raise
        finally:
            timer.cancel()
        if not reply.complete:
            conn.drain_or_close(loop)
        return reply

    async def close(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()
        self._all.clear()
