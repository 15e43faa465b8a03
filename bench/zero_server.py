"""A zero-compute OpenAI streaming server for client benchmarks: the cheapest honest server.

``python bench/zero_server.py [--port 0] [--itl-us 0]`` prints its URL on the first line
of stdout and serves ``POST /v1/completions`` (token-ID prompt, ``max_tokens``) on
127.0.0.1 until SIGTERM/SIGINT. It does no compute: each request streams ``max_tokens``
SSE events of one token each (the deterministic reference tokens of
:mod:`pddbench.tokens`, so the client's integrity check still runs), then a final chunk
with ``usage`` and a ``pdd.times`` object holding the server's own monotonic stamps
(``arrival``: the request's last byte read; ``first_token``: just before the first token
was written), then ``data: [DONE]``. A text prompt is accepted too (its length counted in
words), so that ``vllm bench serve`` can run against the same server.

Why not aiohttp: a client benchmark on a 2-core machine measures the client only if the
server leaves it a core. This server is an ``asyncio.Protocol`` on uvloop that parses
HTTP/1.1 itself (keep-alive, ``Content-Length`` bodies, chunked responses) and writes
pre-encoded bytes: about 5× less CPU per request than the aiohttp test server.

With ``--itl-us N`` the tokens are paced N µs apart (each event its own write); with 0
(default) every event is still its own SSE event and HTTP chunk but they are written
together, as a server with zero compute would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pddbench.tokens import TokenStream

VOCAB = 32000
SEED = 0
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def token_event(token: int) -> bytes:
    return http_chunk(b'data: {"choices":[{"index":0,"text":"x","token_ids":[%d]}]}\n\n' % token)


DONE = http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def error_response(status: int, message: str) -> bytes:
    body = orjson.dumps({"error": {"message": message}})
    return (
        b"HTTP/1.1 %d Error\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (status, len(body), body)
    )


class ZeroProtocol(asyncio.Protocol):
    """One keep-alive connection: requests are answered in order, one at a time."""

    def __init__(self, itl_s: float):
        self.itl_s = itl_s
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        length = 0
        rid = "anon"
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            lname = name.strip().lower()
            if lname == "content-length":
                length = int(value)
            elif lname == "x-request-id":
                rid = value.strip()
        start = head_end + 4
        if len(self.buf) < start + length:
            return
        body, self.buf = self.buf[start : start + length], self.buf[start + length :]
        arrival = time.monotonic()
        try:
            req = orjson.loads(body)
            prompt = req["prompt"]
            n = int(req["max_tokens"])
            if isinstance(prompt, str):  # text (e.g. `vllm bench serve`): no tokenizer here
                prompt = prompt.split()
            if not isinstance(prompt, list):
                raise ValueError("prompt must be a list of token ids or a text")
        except (ValueError, KeyError, TypeError) as exc:
            assert self.transport is not None
            self.transport.write(error_response(400, str(exc)))
            return
        stream = TokenStream(SEED, rid, VOCAB)
        events = [token_event(stream.token(i)) for i in range(n)]
        if self.itl_s > 0:
            self.busy = True
            asyncio.get_running_loop().create_task(self._paced(events, arrival, len(prompt)))
            return
        assert self.transport is not None
        first = time.monotonic()
        self.transport.write(b"".join([HEAD, *events, self._final(arrival, first, len(prompt), n)]))
        if self.buf:
            self._next()

    async def _paced(self, events: list[bytes], arrival: float, prompt_len: int) -> None:
        first = 0.0
        for i, event in enumerate(events):
            if self.transport is None:
                return
            if i == 0:
                first = time.monotonic()
                self.transport.write(HEAD + event)
            else:
                await asyncio.sleep(self.itl_s)
                if self.transport is None:
                    return
                self.transport.write(event)
        if self.transport is not None:
            self.transport.write(self._final(arrival, first, prompt_len, len(events)))
        self.busy = False
        if self.buf:
            self._next()

    @staticmethod
    def _final(arrival: float, first: float, prompt_len: int, n: int) -> bytes:
        final = {
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_len,
                "completion_tokens": n,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
            "pdd": {"pipeline": "zero", "times": {"arrival": arrival, "first_token": first}},
        }
        return http_chunk(b"data: " + orjson.dumps(final) + b"\n\n") + DONE


async def serve(port: int, itl_s: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ZeroProtocol(itl_s), "127.0.0.1", port, backlog=4096)
    sock = server.sockets[0]
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--itl-us", type=float, default=0.0, help="pace tokens this far apart")
    args = ap.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(serve(args.port, args.itl_us * 1e-6))
    else:
        uvloop.run(serve(args.port, args.itl_us * 1e-6))
    os._exit(0)


if __name__ == "__main__":
    main()
