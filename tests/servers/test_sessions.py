"""Internal HTTP sessions: KV sockets carry the bulk DSCP mark, connections stay open."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from pddbench.netem.qos import BULK_TOS
from pddbench.servers.sessions import KEEPALIVE_S, internal_runner, internal_session


async def _exercise() -> tuple[dict[str, list[int]], list[tuple[str, int]]]:
    peers: list[tuple[str, int]] = []
    checked = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        resp = web.StreamResponse()
        await resp.prepare(request)
        await checked.wait()  # the body ends only after the client looked at its socket
        checked.clear()
        await resp.write_eof(b"ok")
        return resp

    app = web.Application()
    app.router.add_get("/x", handler)
    runner = internal_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    tos: dict[str, list[int]] = {}
    try:
        for name, bulk in (("control", False), ("bulk", True)):
            async with internal_session(bulk=bulk) as http:
                for _ in range(3):
                    async with http.get(f"http://127.0.0.1:{port}/x") as resp:
                        assert resp.status == 200
                        conn = resp.connection
                        assert conn is not None and conn.transport is not None
                        sock: socket.socket = conn.transport.get_extra_info("socket")
                        tos.setdefault(name, []).append(
                            sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)
                        )
                        checked.set()
                        assert await resp.read() == b"ok"
    finally:
        await runner.cleanup()
    return tos, peers


def test_bulk_sockets_are_marked_and_connections_are_reused() -> None:
    tos, peers = asyncio.run(_exercise())
    assert tos == {"control": [0, 0, 0], "bulk": [BULK_TOS] * 3}
    # one connection per session, reused for every request
    assert len(set(peers[:3])) == 1 and len(set(peers[3:])) == 1 and peers[0] != peers[3]
    assert KEEPALIVE_S >= 600  # far beyond aiohttp's 15 s client / 75 s server defaults
