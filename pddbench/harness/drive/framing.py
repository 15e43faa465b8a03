"""HTTP/1.1 client pieces shared by both engines, sans-IO: framing, targets, outcomes.

Owns what both HTTP clients (asyncio: :mod:`pddbench.harness.drive.aio.http1`; Locust worker:
:mod:`pddbench.harness.drive.locust.ghttp`) need to know about a response
on a keep-alive connection: its status line and the few headers that frame it
(``Content-Length``, ``Transfer-Encoding: chunked`` with trailers, close-delimited),
whether the connection may be reused, and where the message ends. :meth:`ResponseFramer.feed`
takes the bytes of one socket read and returns the body bytes they completed (chunk
framing removed), so the caller hands each read to the SSE reader with one clock reading
— the same per-read stamping as the asyncio engine's client.

Also shared: the target URL (:class:`Target`, which writes request heads), the body-sink
protocol, the :class:`Reply` of one exchange and the failure exceptions.

Must not: touch sockets, read clocks, or know about SSE, JSON or records.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol
from urllib.parse import urlsplit

DRAIN_S = 2.0  # how long a connection may take to finish a message nobody waits for
MAX_ERROR_BODY = 64 * 1024  # kept of a >= 400 response's body


class ConnectFailed(Exception):
    """The connection could not be opened (refused, unreachable, timed out, TLS)."""


class StreamCut(Exception):
    """The connection closed or broke before the response was complete."""


class ExchangeTimeout(Exception):
    """No byte arrived for the stall limit, or the whole request ran past its limit."""


class RequestLimit(ExchangeTimeout):
    """The whole request ran past the harness's own request limit while the server was
    still answering: the measurement was cut (censored), the server did not fail."""


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

    def add_error_body(self, data: bytes) -> None:
        """Keep up to :data:`MAX_ERROR_BODY` bytes of a >= 400 response's body."""
        room = MAX_ERROR_BODY - len(self.error_body)
        if room > 0:
            self.error_body += data[:room]


_NOT_TLS = "(an https:// URL to a plain-HTTP port?): use http://"


def connect_failed(
    exc: OSError, timeout_s: float, *, tls: bool = False, tcp_answered: bool = False
) -> ConnectFailed:
    """The one-line error for a connection attempt that failed with ``exc`` (``tls``: the
    attempt included a TLS handshake; ``tcp_answered``: a plain TCP connection to the same
    port opened, so what timed out was the handshake)."""
    if tls and getattr(exc, "reason", None) == "WRONG_VERSION_NUMBER":
        return ConnectFailed(f"TLS handshake failed: the server answered plain HTTP {_NOT_TLS}")
    if isinstance(exc, TimeoutError):
        if tls and tcp_answered:
            return ConnectFailed(
                f"TLS handshake timed out after {timeout_s:g} s: the port accepts connections"
                f" but does not answer TLS {_NOT_TLS}"
            )
        return ConnectFailed(f"connect timed out after {timeout_s:g} s")
    if tls and isinstance(exc, ssl.SSLError):
        return ConnectFailed(f"TLS handshake failed: {exc}")
    return ConnectFailed(exc.strerror or str(exc))


def closed_reply(framer: ResponseFramer, reply: Reply | None, detail: str = "") -> Reply:
    """The peer closed the connection: the finished reply of a close-delimited body, or
    :class:`StreamCut` saying where the response was cut."""
    if framer.eof() and reply is not None:
        reply.complete = True
        return reply
    what = "before the response" if reply is None else "mid-response"
    raise StreamCut(f"connection closed {what}{detail}")


_HEADER_VALUE = re.compile(r"[\x20-\x7e]*\Z")


@dataclass(frozen=True)
class Target:
    """Where requests go: scheme, host, port and the base URL's path."""

    host: str
    port: int
    base_path: str
    tls: bool

    @classmethod
    def parse(cls, base_url: str) -> Target:
        parts = urlsplit(base_url)  # ValueError for a malformed IPv6 host
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port  # ValueError when not a number in 0-65535
        if port == 0:
            raise ValueError("port 0 is not a server's port")
        return cls(
            host=parts.hostname,
            port=port or (443 if tls else 80),
            base_path=parts.path.rstrip("/"),
            tls=tls,
        )

    @cached_property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.tls else 80) else f"{host}:{self.port}"

    def request_head(self, method: str, path: str, headers: dict[str, str], length: int) -> bytes:
        """The request line and headers of one request with a ``length``-byte body."""
        for k, v in headers.items():
            if not _HEADER_VALUE.match(v):  # CR/LF would inject headers; latin-1 only
                raise ValueError(f"header {k} value {v[:40]!r} is not printable ASCII")
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return (
            f"{method} {self.base_path}{path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            f"Content-Length: {length}\r\nAccept: text/event-stream, application/json\r\n"
            f"{extra}\r\n"
        ).encode("latin-1")


MAX_HEAD = 64 * 1024

_HEAD, _LENGTH, _CHUNKED, _TO_EOF, _DONE = range(5)
_DATA_CRLF = -2  # inside a chunked body: the CRLF after a chunk's data comes next
_SIZE_LINE = -1  # inside a chunked body: a chunk-size line comes next


class FramingError(Exception):
    """The response is not valid HTTP/1.1 (bad status line, bad chunk size...)."""


class ResponseFramer:
    """One response's framing state; feed it socket reads in order."""

    __slots__ = ("_buf", "_in_trailer", "_remaining", "_state", "keep_alive", "status")

    def __init__(self) -> None:
        self._state = _HEAD
        self._buf = b""
        self._remaining = 0  # bytes left of a Content-Length body or of the current chunk
        self._in_trailer = False
        self.status: int | None = None  # known once the head is complete
        self.keep_alive = True

    @property
    def complete(self) -> bool:
        """The whole message (head and body) has been read."""
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        """Take the bytes of one read; return the body bytes they completed (maybe b"")."""
        if self._state == _HEAD:
            data = self._buf + data if self._buf else data
            self._buf = b""
            while self._state == _HEAD:
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    if len(data) > MAX_HEAD:
                        raise FramingError("response head too large")
                    self._buf = data
                    return b""
                self._parse_head(data[:end])
                data = data[end + 4 :]
        state = self._state
        if state == _CHUNKED:
            return self._chunked(data)
        if state == _LENGTH:
            take = data[: self._remaining]
            self._remaining -= len(take)
            if self._remaining == 0:
                self._state = _DONE
            return take
        if state == _TO_EOF:
            return data
        return b""  # _DONE: bytes after the message are not ours (a broken server)

    def eof(self) -> bool:
        """The peer closed the connection: True when that ends the message properly."""
        self.keep_alive = False
        if self._state == _TO_EOF:
            self._state = _DONE
            return True
        return self._state == _DONE

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            version, status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            raise FramingError(f"bad status line {lines[0][:80]!r}") from None
        if 100 <= status < 200:  # interim response (100 Continue): the real head follows
            return
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
                    raise FramingError("bad Content-Length") from None
            elif lname == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif lname == "connection":
                connection = value.strip().lower()
        self.status = status
        self.keep_alive = connection != "close" and (
            version == "HTTP/1.1" or connection == "keep-alive"
        )
        if chunked:
            self._state, self._remaining = _CHUNKED, _SIZE_LINE
        elif length is not None:
            self._state, self._remaining = (_LENGTH, length) if length > 0 else (_DONE, 0)
        else:
            self._state, self.keep_alive = _TO_EOF, False

    def _chunked(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        pieces: list[bytes] = []
        remaining = self._remaining
        while pos < n:
            if remaining > 0:  # inside a chunk's data
                end = pos + remaining
                if end > n:
                    end = n
                pieces.append(buf[pos:end])
                remaining -= end - pos
                pos = end
                if remaining == 0:
                    remaining = _DATA_CRLF
                continue
            if remaining == _DATA_CRLF:
                if n - pos < 2:
                    break
                pos += 2
                remaining = _SIZE_LINE
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > 1024:
                    raise FramingError("chunk size line too long")
                break
            line = buf[pos:eol]
            pos = eol + 2
            if self._in_trailer:
                if not line:  # the blank line after the trailers ends the message
                    self._state = _DONE
                    self._buf = b""
                    self._remaining = 0
                    return b"".join(pieces)
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise FramingError(f"bad chunk size {line[:20]!r}") from None
            if size == 0:
                self._in_trailer = True
            else:
                remaining = size
        self._remaining = remaining
        self._buf = buf[pos:] if pos < n else b""
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]
