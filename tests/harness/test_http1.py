"""The HTTP/1.1 streaming client against real sockets: framing, keep-alive, failures.

Each test starts a scripted raw asyncio server on 127.0.0.1 that answers every request
with given bytes (optionally split into separate writes), so framing edge cases that
aiohttp-based servers never produce (chunk sizes cut mid-line, trailers, close-delimited
bodies, 100 Continue) are exercised for real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pddbench.harness.drive.aio.http1 import ConnectFailed, ExchangeTimeout, Http1Pool, StreamCut
from pddbench.harness.drive.stream import StreamAccumulator
from pddbench.harness.drive.stream_records import SseReader

Script = Callable[[int], list[bytes]]  # request number -> pieces to write


class Collect:
    """A body sink that keeps everything and can stop on a marker."""

    def __init__(self, stop_on: bytes | None = None):
        self.data = b""
        self.stop_on = stop_on
        self.times: list[float] = []

    def feed(self, now: float, data: bytes) -> bool:
        self.data += data
        self.times.append(now)
        return self.stop_on is not None and self.stop_on in self.data


async def scripted_server(script: Script, *, close_after: bool = False):
    """A server answering request n with ``script(n)`` (pieces written 2 ms apart)."""
    count = 0
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count, connections
        connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":")[1])
                await reader.readexactly(length)
                n = count
                count += 1
                for i, piece in enumerate(script(n)):
                    if i:
                        await asyncio.sleep(0.002)
                    writer.write(piece)
                    await writer.drain()
                if close_after:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.connections = lambda: connections  # type: ignore[attr-defined]
    return server, f"http://127.0.0.1:{port}"


def chunked(*payloads: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads)
    return body + b"0\r\n" + trailer + b"\r\n"


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


async def one(pool: Http1Pool, sink: Collect, **kw: float):
    return await pool.exchange("POST", "/x", b"{}", {}, sink, time.monotonic, **kw)


def run(coro):
    return asyncio.run(coro)


def test_chunked_body_reassembled_and_connection_reused() -> None:
    async def main() -> None:
        body = chunked(b"data: 1\n\n", b"data: 2\n\n", trailer=b"X-T: 1\r\n")
        server, url = await scripted_server(lambda n: [OK_CHUNKED + body])
        pool = Http1Pool(url)
        for _ in range(3):
            sink = Collect()
            reply = await one(pool, sink)
            assert reply.status == 200 and reply.complete
            assert sink.data == b"data: 1\n\ndata: 2\n\n"
        assert pool.opened == 1 and server.connections() == 1
        await pool.close()
        server.close()

    run(main())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=1, max_value=120), max_size=8))
def test_chunked_framing_survives_any_split(cuts: list[int]) -> None:
    """Splitting the response anywhere (mid size line, mid CRLF) changes nothing."""
    payloads = [b'data: {"a": %d}\n\n' % i for i in range(6)]
    wire = OK_CHUNKED + chunked(*payloads, trailer=b"Trailer: x\r\n")
    points = sorted({c % len(wire) for c in cuts} - {0})
    pieces = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]

    async def main() -> None:
        server, url = await scripted_server(lambda n: pieces)
        pool = Http1Pool(url)
        sink = Collect()
        reply = await one(pool, sink)
        assert reply.complete and sink.data == b"".join(payloads)
        # the connection went back to the pool in a clean state
        sink2 = Collect()
        assert (await one(pool, sink2)).complete and sink2.data == sink.data
        assert pool.opened == 1
        await pool.close()
        server.close()

    run(main())


def test_content_length_and_close_delimited_bodies() -> None:
    async def main() -> None:
        cl = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        server, url = await scripted_server(lambda n: [cl[:20], cl[20:]])
        pool = Http1Pool(url)
        sink = Collect()
        assert (await one(pool, sink)).complete and sink.data == b"hello"
        await pool.close()
        server.close()

        eof = b"HTTP/1.0 200 OK\r\n\r\nuntil close"
        server, url = await scripted_server(lambda n: [eof], close_after=True)
        pool = Http1Pool(url)
        sink = Collect()
        reply = await one(pool, sink)
        assert reply.complete and sink.data == b"until close"
        await pool.close()
        server.close()

    run(main())


def test_interim_100_continue_then_real_response() -> None:
    async def main() -> None:
        wire = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_CHUNKED + chunked(b"x")
        server, url = await scripted_server(lambda n: [wire])
        pool = Http1Pool(url)
        sink = Collect()
        reply = await one(pool, sink)
        assert reply.status == 200 and sink.data == b"x"
        await pool.close()
        server.close()

    run(main())


def test_error_status_body_is_returned_not_streamed() -> None:
    async def main() -> None:
        body = b'{"error": {"message": "bad prompt"}}'
        wire = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        server, url = await scripted_server(lambda n: [wire])
        pool = Http1Pool(url)
        sink = Collect()
        reply = await one(pool, sink)
        assert reply.status == 400 and reply.error_body == body and sink.data == b""
        await pool.close()
        server.close()

    run(main())


def test_sink_satisfied_early_returns_at_once_then_drains_for_reuse() -> None:
    """[DONE] arrives; the terminating chunk comes 50 ms later: the exchange does not wait,
    and the connection is reused once the message has ended."""

    async def main() -> None:
        first = OK_CHUNKED + b"%x\r\n%s\r\n" % (14, b"data: [DONE]\n\n")

        def script(n: int) -> list[bytes]:
            return [first, b"0\r\n\r\n"]

        server, url = await scripted_server(script)
        pool = Http1Pool(url)
        sink = Collect(stop_on=b"[DONE]")
        t0 = time.monotonic()
        reply = await one(pool, sink)
        assert not reply.complete and time.monotonic() - t0 < 0.5
        await asyncio.sleep(0.05)  # the terminator is drained meanwhile
        sink2 = Collect(stop_on=b"[DONE]")
        await one(pool, sink2)
        assert pool.opened == 1
        await pool.close()
        server.close()

    run(main())


def test_connect_refused_is_connect_failed() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        pool = Http1Pool(f"http://127.0.0.1:{port}")
        with pytest.raises(ConnectFailed):
            await one(pool, Collect())

    run(main())


def test_https_to_a_plain_http_port_says_use_http() -> None:
    """A plain-HTTP server either answers the ClientHello with an HTTP error (the client
    reads a wrong TLS version) or waits for the request's blank line forever (the
    handshake times out): both say what to do, neither is a bare "connect timed out"."""

    async def answers_400(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(answers_400, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(ConnectFailed, match=r"answered plain HTTP .*use http://"):
            await one(Http1Pool(f"https://127.0.0.1:{port}"), Collect())
        server.close()
        waits, url = await scripted_server(lambda n: [OK_CHUNKED + chunked()])
        pool = Http1Pool(url.replace("http:", "https:"), connect_timeout_s=0.3)
        with pytest.raises(ConnectFailed, match=r"TLS handshake timed out .*use http://"):
            await one(pool, Collect())
        waits.close()

    run(main())


def test_stall_limit_and_cut_stream() -> None:
    async def main() -> None:
        stall = OK_CHUNKED + chunked(b"data: 1\n\n")[:-5]  # never terminates
        server, url = await scripted_server(lambda n: [stall])
        pool = Http1Pool(url)
        t0 = time.monotonic()
        with pytest.raises(ExchangeTimeout):
            await one(pool, Collect(), stall_timeout_s=0.3)
        assert 0.25 < time.monotonic() - t0 < 2.0
        await pool.close()
        server.close()

        server, url = await scripted_server(lambda n: [stall], close_after=True)
        pool = Http1Pool(url)
        with pytest.raises(StreamCut, match="mid-response"):
            await one(pool, Collect())
        await pool.close()
        server.close()

    run(main())


def test_idle_connection_closed_by_server_is_replaced_once() -> None:
    """A keep-alive connection the server closed while idle: the next request succeeds."""

    async def main() -> None:
        wire = OK_CHUNKED + chunked(b"ok")
        server, url = await scripted_server(lambda n: [wire], close_after=True)
        pool = Http1Pool(url)
        for _ in range(3):
            sink = Collect()
            assert (await one(pool, sink)).complete and sink.data == b"ok"
            await asyncio.sleep(0.02)
        await pool.close()
        server.close()

    run(main())


def test_malformed_response_is_a_stream_cut() -> None:
    async def main() -> None:
        server, url = await scripted_server(
            lambda n: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]
        )
        pool = Http1Pool(url)
        with pytest.raises(StreamCut, match="malformed"):
            await one(pool, Collect())
        await pool.close()
        server.close()

    run(main())


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10))
def test_sse_reader_feed_is_split_invariant(cuts: list[int]) -> None:
    """SseReader.feed gives the same tokens and stop decision for any split of the bytes."""
    events = [b'data: {"choices":[{"text":"x","token_ids":[%d]}]}\n\n' % i for i in range(5)]
    wire = b": comment\r\n" + b"".join(events) + b"data: [DONE]\n\n"
    points = sorted({c % len(wire) for c in cuts} - {0})
    acc = StreamAccumulator()
    reader = SseReader(acc)
    stopped = False
    for i, (a, b) in enumerate(zip([0, *points], [*points, len(wire)], strict=True)):
        if reader.feed(float(i), wire[a:b]):
            stopped = True
            break
    assert stopped and reader.done
    summary = acc.summary()
    assert summary.output_tokens == 5 and summary.chunks == 5


def test_deferred_sse_parses_later_with_arrival_stamps_and_stops_on_done_or_error() -> None:
    from pddbench.harness.drive.stream_records import DeferredSse

    ev = b'data: {"choices":[{"text":"error","token_ids":[%d]}]}\n\n'
    acc = StreamAccumulator()
    reader = SseReader(acc)
    sink = DeferredSse(reader)
    assert not sink.feed(1.0, ev % 0)  # a token whose text is "error": parsed, not a stop
    assert not sink.feed(2.0, ev % 1 + b"data: [DO")
    assert acc.chunks == 2  # the "error" bytes made it parse what it held
    assert sink.feed(3.0, b"NE]\n\n") is False  # split marker: found only by parsing later
    assert sink.feed(4.0, b"data: [DONE]\n\n")  # maybe the end: parsed at once, by events
    assert acc.chunks == 2 and reader.done
    assert not sink.drain() and acc.summary().first_token_s == 1.0
    # a token whose text holds the marker is not the end (an event is the whole data)
    acc3 = StreamAccumulator()
    sink3 = DeferredSse(SseReader(acc3))
    assert not sink3.feed(1.0, b'data: {"choices":[{"text":"data: [DONE]","token_ids":[1]}]}\n\n')
    assert acc3.chunks == 1 and not sink3.reader.done
    acc2 = StreamAccumulator()
    reader2 = SseReader(acc2)
    sink2 = DeferredSse(reader2)
    assert sink2.feed(1.0, b'data: {"error": {"message": "instance died"}}\n\n')
    assert reader2.server_error == "instance died"
