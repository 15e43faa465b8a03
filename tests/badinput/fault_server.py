"""A misbehaving OpenAI-completions server for the bad-input corpus (real aiohttp, loopback).

The first path segment of the request chooses the behaviour, so one server serves every
fault case: ``--target http://127.0.0.1:PORT/<mode>`` makes the client post to
``/<mode>/v1/completions`` (or ``/<mode>/generate``). Modes:

``ok``           the asked number of tokens (ids + usage), then ``[DONE]``
``done-only``    200 with only ``data: [DONE]``
``few``/``many`` 5 tokens fewer / 16 more than asked
``text-only``    one text chunk per token, no ids, no usage
``usage-zero``   text chunks, but ``usage.completion_tokens`` says 0
``done-in-text`` ok, but one token's text contains ``data: [DONE]``
``crlf``         ok, events separated by CRLF CRLF
``split``        ok, one byte per write (events cut anywhere)
``http500``/``http429``  an error status with a JSON body
``bad-json``     a chunk that is not JSON; ``non-object``: a JSON list chunk
``error-event``  an SSE error event mid-stream; ``no-done``: ends without ``[DONE]``
``cut``          connection closed mid-stream; ``stall``: stops after one token
``slow``         0.3 s per token (for the whole-request timeout)
``paced``        ok, 20 ms per token
``plain-json``   a whole (non-streamed) completion as application/json, as a server
                 that ignores ``stream=true`` answers
``huge-numbers`` ok, but the server's timing fields are past 64-bit integers
``usage-huge``   text chunks, ``usage.completion_tokens`` past 64-bit integers

With ``--log FILE`` every response the server finished is appended there as
``<request id> <monotonic time>`` (flushed at once): the ground truth of which requests
ended when, for the interruption tests.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from aiohttp import web

from pddbench.tokens import TokenStream

LOG: list = []  # [file] when --log is given


def _event(obj: object, sep: bytes = b"\n\n") -> bytes:
    return b"data: " + json.dumps(obj).encode() + sep


async def completions(request: web.Request) -> web.StreamResponse:
    mode = request.match_info["mode"]
    body = await request.json()
    n = int(body.get("max_tokens") or body.get("sampling_params", {}).get("max_new_tokens", 16))
    rid = request.headers.get("X-Request-Id", "anon")
    if mode in ("http500", "http429"):
        status = int(mode[4:])
        return web.json_response({"error": {"message": f"injected {status}"}}, status=status)
    if mode == "plain-json":
        text = "".join(f" t{i}" for i in range(n))
        usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": n}
        return web.json_response({"choices": [{"text": text, "index": 0}], "usage": usage})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    sep = b"\r\n\r\n" if mode == "crlf" else b"\n\n"
    count = {"few": max(0, n - 5), "many": n + 16, "done-only": 0}.get(mode, n)
    stream = TokenStream(0, rid, 32000)
    events: list[bytes] = []
    for i in range(count):
        text = "data: [DONE]" if mode == "done-in-text" and i == 1 else f" t{i}"
        choice: dict[str, object] = {"text": text}
        if mode not in ("text-only", "usage-zero", "usage-huge"):
            choice["token_ids"] = [stream.token(i)]
        events.append(_event({"choices": [choice]}, sep))
    if mode not in ("text-only", "done-only"):
        done = 0 if mode == "usage-zero" else count
        usage = {"prompt_tokens": len(body.get("prompt") or []), "completion_tokens": done}
        final: dict[str, object] = {"choices": [], "usage": usage}
        if mode == "huge-numbers":  # server timing fields and usage past int64
            final["pdd"] = {"wan_bytes": 1e300, "relay_tokens": 10**30, "pipeline": "P->D"}
            usage["prompt_tokens_details"] = {"cached_tokens": 10**30}
        if mode == "usage-huge":  # text chunks; usage claims 10^30 tokens
            usage["completion_tokens"] = 10**30
        events.append(_event(final, sep))
    if mode == "bad-json":
        events.insert(len(events) // 2, b"data: {not json\n\n")
    if mode == "non-object":
        events.insert(len(events) // 2, b"data: [1, 2, 3]\n\n")
    if mode == "error-event":
        events.insert(len(events) // 2, _event({"error": {"message": "instance died"}}))
    if mode != "no-done":
        events.append(b"data: [DONE]" + sep)
    for i, ev in enumerate(events):
        if mode == "cut" and i == len(events) // 2:
            assert request.transport is not None
            request.transport.close()
            return resp
        if mode == "stall" and i == 1:
            await asyncio.sleep(30)
        if mode == "slow":
            await asyncio.sleep(0.3)
        if mode == "paced":
            await asyncio.sleep(0.02)
        if mode == "split":
            for b in range(len(ev)):
                await resp.write(ev[b : b + 1])
        else:
            await resp.write(ev)
    await resp.write_eof()
    if LOG:
        LOG[0].write(f"{rid} {time.monotonic()}\n")
        LOG[0].flush()
    return resp


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/{mode}/v1/completions", completions)
    app.router.add_post("/{mode}/generate", completions)
    app.router.add_get("/{mode}/health", lambda _r: web.json_response({"ok": True}))
    return app


def main() -> None:
    """``python -m tests.badinput.fault_server``: serve on a free port, print the URL."""

    if sys.argv[1:2] == ["--log"]:
        LOG.append(open(sys.argv[2], "a"))  # noqa: SIM115

    async def serve() -> None:
        runner = web.AppRunner(make_app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
