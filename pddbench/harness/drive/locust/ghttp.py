"""A lean HTTP/1.1 client on gevent sockets for a Locust worker: keep-alive pool, reads stamped.

Owns the worker's sockets to the system under test: :class:`GeventHttp1Pool` keeps idle
keep-alive connections (no limit: an open-loop schedule never waits for a socket), and
:meth:`GeventHttp1Pool.exchange` sends one request (head and body in one write), then
reads the response one ``recv`` at a time, takes one clock reading per read and hands
the body bytes of that read to a sink (the SSE reader) — no line iterator, no header
objects, no per-line copies between the kernel and the timestamp, which is what keeps a
worker's CPU per request close to the asyncio engine's (its client has the same shape:
:mod:`pddbench.harness.drive.aio.http1`). Framing is :mod:`.framing` (sans-IO).

A response with status >= 400 is collected (up to 64 KiB) instead of given to the sink.
When the sink has what it needs before the message ends, the exchange returns at once
and the rest of the message is drained in the background (the connection goes back to
the pool if it ends within :data:`DRAIN_S`, else it is closed).

Failures are exceptions: :class:`ConnectFailed`, :class:`StreamCut` (closed or malformed
mid-exchange), ``TimeoutError`` (no byte for the stall limit). A greenlet kill closes the
connection. Must not: parse SSE or JSON, or know about records; be imported outside a
gevent process.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

import gevent
import gevent.socket

from pddbench.harness.drive.framing import (
    DRAIN_S,
    BodySink,
    ConnectFailed,
    FramingError,
    Reply,
    ResponseFramer,
    StreamCut,
    Target,
    closed_reply,
    connect_failed,
)

__all__ = ["ConnectFailed", "GeventHttp1Pool", "Reply", "StreamCut"]

RECV_BYTES = 64 * 1024


class GeventHttp1Pool:
    """Keep-alive connections to one target (``http`` or ``https`` base URL)."""

    def __init__(
        self, base_url: str, *, connect_timeout_s: float = 10.0, stall_timeout_s: float = 120.0
    ):
        self.target = Target.parse(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._ssl = ssl.create_default_context() if self.target.tls else None
        self._idle: list[socket.socket] = []
        self.opened = 0  # connections opened over the pool's life

    def _connect(self) -> socket.socket:
        try:
            sock = gevent.socket.create_connection(
                (self.target.host, self.target.port), timeout=self.connect_timeout_s
            )
        except OSError as exc:  # TimeoutError included
            raise connect_failed(exc, self.connect_timeout_s) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is not None:
            try:
                sock = self._ssl.wrap_socket(sock, server_hostname=self.target.host)
            except OSError as exc:  # ssl.SSLError and the socket's timeout included
                sock.close()
                raise connect_failed(
                    exc, self.connect_timeout_s, tls=True, tcp_answered=True
                ) from exc
        sock.settimeout(self.stall_timeout_s)
        self.opened += 1
        return sock

    def close(self) -> None:
        for sock in self._idle:
            sock.close()
        self._idle.clear()

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        sink: BodySink,
        clock: Callable[[], float],
    ) -> Reply:
        """Send one request; feed its body to ``sink`` until the sink or the message ends.

        A keep-alive connection found closed before any byte of the response arrived is
        replaced once, transparently (the server closed it while it sat idle)."""
        wire = self.target.request_head(method, path, headers, len(body)) + body
        sock = self._idle.pop() if self._idle else None
        reused = sock is not None
        if sock is None:
            sock = self._connect()
        while True:
            try:
                return self._exchange_on(sock, wire, sink, clock, retry_on_close=reused)
            except _ClosedBeforeReply:
                reused = False
                sock = self._connect()

    def _exchange_on(
        self,
        sock: socket.socket,
        wire: bytes,
        sink: BodySink,
        clock: Callable[[], float],
        *,
        retry_on_close: bool,
    ) -> Reply:
        framer = ResponseFramer()
        reply: Reply | None = None
        received = False
        try:
            try:
                sock.sendall(wire)
            except OSError as exc:
                if retry_on_close:
                    raise _ClosedBeforeReply from exc
                raise StreamCut(f"connection broke while sending: {exc}") from exc
            recv = sock.recv
            while True:
                try:
                    data = recv(RECV_BYTES)
                except ConnectionError as exc:
                    if retry_on_close and not received:
                        raise _ClosedBeforeReply from exc
                    raise StreamCut(f"connection broke: {exc}") from exc
                now = clock()
                if not data:
                    if retry_on_close and not received:
                        raise _ClosedBeforeReply
                    sock.close()
                    return closed_reply(framer, reply)
                received = True
                body = framer.feed(data)
                if reply is None:
                    if framer.status is None:
                        continue
                    reply = Reply(framer.status)
                if body:
                    if reply.status >= 400:
                        reply.add_error_body(body)
                    elif sink.feed(now, body):  # satisfied: the rest is drained, not read
                        if framer.complete:
                            break
                        gevent.spawn(self._drain, sock, framer)
                        return reply
                if framer.complete:
                    break
        except FramingError as exc:
            sock.close()
            raise StreamCut(f"malformed HTTP response: {exc}") from exc
        except BaseException:  # a stall, a kill, a cut: the connection's state is unknown
            sock.close()
            raise
        reply.complete = True
        if framer.keep_alive:
            self._idle.append(sock)
        else:
            sock.close()
        return reply

    def _drain(self, sock: socket.socket, framer: ResponseFramer) -> None:
        """Finish reading a message nobody waits for; keep the connection if it ends soon."""
        try:
            with gevent.Timeout(DRAIN_S, False):
                while not framer.complete:
                    data = sock.recv(RECV_BYTES)
                    if not data:
                        break
                    framer.feed(data)
        except (OSError, FramingError):
            pass
        if framer.complete and framer.keep_alive:
            self._idle.append(sock)
        else:
            sock.close()


class _ClosedBeforeReply(Exception):
    """A reused connection turned out closed before the response began (retry once)."""
