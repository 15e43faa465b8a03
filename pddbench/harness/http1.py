"""A small HTTP/1.1 client for streamed completions: keep-alive pool, bytes stamped on arrival.

Owns the sockets of the asyncio replay engine: one :class:`Http1Pool` per target keeps
idle keep-alive connections, :meth:`Http1Pool.exchange` sends one request (head and
body in one write) and hands every piece of response body to a sink *inside*
``data_received``, with one clock reading per socket read. There is no stream reader, no
task wake-up and no line iterator between the kernel handing the bytes over and the
timestamp, which is what keeps the client's first-token stamp within a fraction of a
millisecond of the server's at hundreds of requests per second on two cores — aiohttp's
reader costs several times more CPU per chunk (see ``bench/bench_client.py``).

Framing: ``Content-Length``, ``Transfer-Encoding: chunked`` (with trailers) and
close-delimited bodies. A response with status >= 400 is collected (up to 64 KiB) and
returned instead of being given to the sink. When the sink has what it needs before the
message ends (``[DONE]`` before the final zero chunk), the exchange returns at once and
the connection finishes reading the message in the background, returning to the pool if
it ends within :data:`DRAIN_S`; otherwise it is closed.

Failures are exceptions of this module — :class:`ConnectFailed`, :class:`StreamCut`,
:class:`ExchangeTimeout` — for the caller to turn into records. Must not: parse SSE or
JSON, or know about records.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

DRAIN_S = 2.0  # how long a connection may take to finish a message nobody waits for
MAX_ERROR_BODY = 64 * 1024
MAX_HEAD = 64 * 1024


class ConnectFailed(Exception):
    """The connection could not be opened (refused, unreachable, timed out)."""


class StreamCut(Exception):
    """The connection closed or broke before the response was complete."""


class ExchangeTimeout(Exception):
    """No byte arrived for the stall limit, or the whole request ran past its limit."""


class BodySink(Protocol):
    def feed(self, now: float, data: bytes) -> bool:
        """Take body bytes that arrived at ``now``; return True when nothing more is needed."""
        ...


@dataclass
class Reply:
    """How one exchange ended (the body itself went to the sink)."""

    status: int
    error_body: bytes = b""  # the body of a >= 400 response
    complete: bool = False  # the HTTP message ended (not only the sink being satisfied)


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    base_path: str
    tls: bool

    @classmethod
    def parse(cls, base_url: str) -> Target:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        tls = parts.scheme == "https"
        return cls(
            host=parts.hostname,
            port=parts.port or (443 if tls else 80),
            base_path=parts.path.rstrip("/"),
            tls=tls,
        )

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


# response framing
_HEAD, _LENGTH, _CHUNKED, _TO_EOF, _DONE = range(5)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    def __init__(self, pool: Http1Pool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.state = _HEAD
        self.buf = b""
        self.reply: Reply | None = None
        self.keep_alive = True
        self.remaining = 0  # bytes left of a Content-Length body or of the current chunk
        self.in_trailer = False
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
        if self.state == _TO_EOF and self.reply is not None:
            self.reply.complete = True
            self._resolve(self.reply)
        else:
            detail = f": {exc}" if exc else ""
            what = "before the response" if self.reply is None else "mid-response"
            self._fail(StreamCut(f"connection closed {what}{detail}"))

    def data_received(self, data: bytes) -> None:
        now = self.clock() if self.clock is not None else 0.0
        self.last_rx = now
        self.received_any = True
        while self.state == _HEAD:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    self._protocol_error("response head too large")
                return
            head, data = self.buf[:end], self.buf[end + 4 :]
            self.buf = b""
            if not self._parse_head(head):
                return
        self._body(now, data)

    # -- parsing ---------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        try:
            status = int(status_line[1])
            version = status_line[0]
        except (IndexError, ValueError):
            self._protocol_error(f"bad status line {lines[0][:80]!r}")
            return False
        if 100 <= status < 200:  # interim response (100 Continue): the real head follows
            return True
        length: int | None = None
        chunked = False
        connection = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            lname = name.strip().lower()
            if lname == "content-length":
                try:
                    length = int(value)
                except ValueError:
                    self._protocol_error("bad Content-Length")
                    return False
            elif lname == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif lname == "connection":
                connection = value.strip().lower()
        self.reply = Reply(status=status)
        self.keep_alive = connection != "close" and (
            version == "HTTP/1.1" or connection == "keep-alive"
        )
        if chunked:
            self.state, self.remaining = _CHUNKED, -1
        elif length is not None:
            self.state, self.remaining = _LENGTH, length
            if length == 0:
                self._message_end()
                return False
        else:
            self.state, self.keep_alive = _TO_EOF, False
        return True

    def _body(self, now: float, data: bytes) -> None:
        if self.state == _LENGTH:
            take = data[: self.remaining]
            self.remaining -= len(take)
            self._deliver(now, take)
            if self.remaining == 0 and self.state == _LENGTH:
                self._message_end()
        elif self.state == _CHUNKED:
            self._chunked(now, data)
        elif self.state == _TO_EOF:
            self._deliver(now, data)

    def _chunked(self, now: float, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos, n = 0, len(buf)
        pieces: list[bytes] = []
        while pos < n:
            if self.remaining > 0:  # inside a chunk's data
                end = min(n, pos + self.remaining)
                pieces.append(buf[pos:end])
                self.remaining -= end - pos
                pos = end
                if self.remaining == 0:
                    self.remaining = -2  # its CRLF comes next
                continue
            if self.remaining == -2:
                if n - pos < 2:
                    break
                pos += 2
                self.remaining = -1
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:
                    self._protocol_error("chunk size line too long")
                    return
                break
            line = buf[pos:eol]
            pos = eol + 2
            if self.in_trailer:
                if not line:  # the blank line after the trailers ends the message
                    self.buf = b""
                    if pieces:
                        self._deliver(now, b"".join(pieces))
                    self._message_end()
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self._protocol_error(f"bad chunk size {line[:20]!r}")
                return
            if size == 0:
                self.in_trailer = True
            else:
                self.remaining = size
        self.buf = buf[pos:] if pos < n else b""
        if pieces:
            self._deliver(now, b"".join(pieces))

    def _deliver(self, now: float, data: bytes) -> None:
        reply = self.reply
        if not data or reply is None:
            return
        if reply.status >= 400:
            if len(reply.error_body) < MAX_ERROR_BODY:
                reply.error_body += data[: MAX_ERROR_BODY - len(reply.error_body)]
            return
        sink = self.sink
        if sink is not None and sink.feed(now, data):
            self.sink = None  # satisfied: the rest of the message is drained, not read
            self._resolve(reply)

    def _message_end(self) -> None:
        reply = self.reply
        self.state = _DONE
        if reply is not None:
            reply.complete = True
            self._resolve(reply)
        if self.drain_timer is not None:
            self.drain_timer.cancel()
        if self.keep_alive and not self.closed:
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

    def _protocol_error(self, message: str) -> None:
        self._fail(StreamCut(f"malformed HTTP response: {message}"))
        self.close()

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
        if self.state == _TO_EOF:
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

    def request_head(self, method: str, path: str, headers: dict[str, str], length: int) -> bytes:
        lines = [
            f"{method} {self.target.base_path}{path} HTTP/1.1",
            f"Host: {self.target.host_header}",
            f"Content-Length: {length}",
            "Accept: text/event-stream, application/json",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self), self.target.host, self.target.port, ssl=self._ssl
                )
        except TimeoutError as exc:
            raise ConnectFailed(f"connect timed out after {self.connect_timeout_s:g} s") from exc
        except OSError as exc:
            raise ConnectFailed(exc.strerror or str(exc)) from exc
        self.opened += 1
        self._all.add(conn)
        return conn

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
        head = self.request_head(method, path, headers, len(body))
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
                conn._fail(ExchangeTimeout(f"request ran past {total_timeout_s:g} s"))
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
