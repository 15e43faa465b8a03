"""A small, real aiohttp SSE server for client and engine tests (runs on 127.0.0.1).

Streams the deterministic reference tokens (pddbench.tokens) for each request, with
configurable tokens per chunk and pacing, and fault modes chosen by request-id suffix:
``-http500`` (HTTP error), ``-errevent`` (SSE error event mid-stream), ``-cut`` (connection
dropped without [DONE]), ``-dup`` (a duplicated token), ``-stall`` (stops sending), ``-slow``
(a token every 0.2 s: never stalls, runs past a short request limit).
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from pddbench.tokens import TokenStream

LOG: web.AppKey[list] = web.AppKey("log", list)


def make_app(
    *, tokens_per_chunk: int = 1, token_delay_s: float = 0.0, seed: int = 0
) -> web.Application:
    app = web.Application()
    app[LOG] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid = request.headers.get("X-Request-Id", "anon")
        prompt = body.get("prompt")
        if not isinstance(prompt, list):
            return web.json_response({"error": {"message": "prompt must be token ids"}}, status=400)
        if rid.endswith("-http500"):
            return web.json_response({"error": {"message": "boom"}}, status=500)
        n = int(body["max_tokens"])
        app[LOG].append((rid, time.monotonic(), len(prompt)))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        stream = TokenStream(seed, rid, 32000)
        toks = [stream.token(i) for i in range(n)]
        if rid.endswith("-dup") and n > 2:
            toks = toks[:2] + toks[1:-1]
        sent = 0
        while sent < n:
            k = min(tokens_per_chunk, n - sent)
            if token_delay_s:
                await asyncio.sleep(token_delay_s * k)
            if rid.endswith("-slow"):
                if request.transport is None or request.transport.is_closing():
                    return resp
                await asyncio.sleep(0.2 * k)
            if rid.endswith("-errevent") and sent >= n // 2:
                await resp.write(b'data: {"error": {"message": "instance died"}}\n\n')
                return resp
            if rid.endswith("-cut") and sent >= n // 2:
                request.transport.close()
                return resp
            if rid.endswith("-stall") and sent >= 1:
                for _ in range(600):  # stall until the client gives up (or 30 s)
                    if request.transport is None or request.transport.is_closing():
                        return resp
                    await asyncio.sleep(0.05)
            chunk = {"choices": [{"text": "x" * k, "token_ids": toks[sent : sent + k]}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            sent += k
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        final = {"choices": [], "usage": usage, "pdd": {"pipeline": "test"}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app.router.add_post("/v1/completions", completions)
    # how many completion requests reached the server (the ground truth of what was sent)
    app.router.add_get("/received", lambda _r: web.json_response({"requests": len(app[LOG])}))
    return app


class RunningServer:
    """Starts ``make_app`` on 127.0.0.1 (a free port unless given) in the current event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kwargs: object):
        self.app = make_app(**kwargs)  # type: ignore[arg-type]
        self.app.router.add_get("/health", lambda _r: web.json_response({"ok": True}))
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.host, self.port = host, port

    async def __aenter__(self) -> RunningServer:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{self.host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def main() -> None:
    """``python -m tests.harness.sse_server``: serve on a free port, print the URL, run forever."""
    import sys

    async def serve() -> None:
        args = sys.argv[1:]
        kwargs: dict[str, object] = {
            "tokens_per_chunk": int(args[0]) if args else 1,
            "token_delay_s": float(args[1]) if len(args) > 1 else 0.0,
        }
        if len(args) > 3:  # HOST PORT: a fixed address, as an engine command would give
            kwargs["host"], kwargs["port"] = args[2], int(args[3])
        async with RunningServer(**kwargs) as srv:
            print(srv.url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
