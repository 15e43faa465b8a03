"""Pre-warmed KV peer connections, as a transfer engine keeps them.

Production KV transfer engines (Mooncake, NIXL) open their peer connections once and keep
them warm; a benchmark whose first KV transfer per peer pays the TCP handshake and slow
start measures TCP, not the system. Two internal endpoints do it:

* ``POST /internal/prewarm`` on a KV sender (prefill, relay-decode) with
  :class:`PrewarmRequest`: open ``connections`` pooled connections of the *bulk* session
  (the one KV transfers use, kept alive for an hour) to each peer and push ``bytes`` through
  each, so every window is open; answers what it did;
* ``POST /internal/warm`` on every instance drains such a body.

With ``tcp_slow_start_after_idle = 0`` (the emulated network's default) the windows stay
open between requests. Must not touch jobs, engines or metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from pddbench.servers import kvlink

_ZEROS = memoryview(bytes(1 << 20))


class PrewarmRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    peers: list[str]  # host:port
    bytes: int = Field(ge=0, le=1 << 31)
    connections: int = Field(default=2, ge=1, le=16)


async def _body(nbytes: int) -> AsyncIterator[memoryview]:
    left = nbytes
    while left > 0:
        n = min(left, len(_ZEROS))
        yield _ZEROS[:n]
        left -= n


async def h_warm(request: web.Request) -> web.Response:
    got = 0
    async for piece in request.content.iter_any():
        got += len(piece)
    return web.json_response({"bytes": got})


def add_routes(router: web.UrlDispatcher, kv_session: Callable[[], aiohttp.ClientSession]) -> None:
    async def h_prewarm(request: web.Request) -> web.Response:
        req = PrewarmRequest.model_validate(await request.json())
        http = kv_session()
        start = time.monotonic()

        async def one(peer: str) -> None:
            async with http.post(f"http://{peer}/internal/warm", data=_body(req.bytes)) as r:
                await r.read()
                if r.status != 200:
                    raise web.HTTPBadGateway(text=f"warm-up to {peer}: HTTP {r.status}")

        # concurrent, so the pool opens `connections` sockets per peer (then keeps them)
        await asyncio.gather(*(one(p) for p in req.peers for _ in range(req.connections)))
        comp = kvlink.compensation()
        if comp is not None:  # the windows are open now: no slow-start compensation
            for peer in req.peers:
                comp.used(kvlink.peer_host(peer), time.monotonic())
        return web.json_response(
            {
                "peers": req.peers,
                "connections": req.connections,
                "bytes": req.bytes,
                "seconds": time.monotonic() - start,
            }
        )

    router.add_post("/internal/warm", h_warm)
    router.add_post("/internal/prewarm", h_prewarm)
