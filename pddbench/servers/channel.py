"""The event channel: one long-lived stream per (instance, router) carrying every request's events.

Owns both ends of it. Per-request streams cost one socket write per token per request; a
decode step of a batch of B requests then costs B writes and B wake-ups of the router. The
channel batches instead: everything an instance emits between two loop iterations (all the
tokens of a step, for every request) goes out in one write, and the router reads it with one
wake-up. It is also the liveness signal: when the channel breaks, the router fails every
request that involves that instance at once, and the instance aborts every request the
router started.

Wire format (newline-delimited, see :mod:`~pddbench.servers.protocol`): a token is the
text line ``T <rid> <position> <token id>``; any other event is a JSON object with ``ev``
and ``rid``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from pddbench.servers import protocol as proto


class EventChannel:
    """Instance side: buffers lines, writes them in one go per loop iteration."""

    def __init__(self, router_id: str, hello: dict[str, Any]) -> None:
        self.router_id = router_id
        self.hello = json.dumps(hello, separators=(",", ":")).encode()
        self._pending: list[bytes] = []
        self._wake = asyncio.Event()
        self.closed = False

    def push(self, line: bytes) -> None:
        if not self.closed:
            self._pending.append(line)
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def serve(self, request: web.Request) -> web.StreamResponse:
        """Stream buffered lines until the router goes away or the channel is replaced."""
        resp = web.StreamResponse(headers={"Content-Type": proto.NDJSON})
        await resp.prepare(request)
        await resp.write(self.hello + b"\n")  # the router knows the channel is open
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            if self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                await resp.write(data)
        return resp


def token_line(rid: str, position: int, token: int) -> bytes:
    return b"T %s %d %d\n" % (rid.encode(), position, token)


def event_line(rid: str, ev: str, **fields: Any) -> bytes:
    fields["ev"] = ev
    fields["rid"] = rid
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def parse(line: bytes) -> tuple[str, tuple[int, int] | dict[str, Any]]:
    """(rid, (position, token)) for a token line, (rid, event) otherwise."""
    if line.startswith(b"T "):
        _, rid, pos, tok = line.split()
        return rid.decode(), (int(pos), int(tok))
    obj = json.loads(line)
    if not isinstance(obj, dict) or "ev" not in obj or "rid" not in obj:
        raise ValueError(f"not an event: {line[:80]!r}")
    return obj["rid"], obj


class ChannelReader:
    """Router side: keeps a channel to one instance open and hands events to ``deliver``."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        instance_id: str,
        address: str,
        router_id: str,
        deliver: Callable[[str, str, Any], None],
        lost: Callable[[str, str], None],
        hello: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.http = http
        self.instance_id = instance_id
        self.url = f"http://{address}/internal/events?router={router_id}"
        self.deliver = deliver
        self.lost = lost
        self.hello = hello
        self.connected = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        why = "event channel closed"
        cancelled = False
        try:
            async with self.http.get(self.url) as resp:
                if resp.status != 200:
                    why = f"event channel refused: HTTP {resp.status}"
                    return
                self.hello(self.instance_id, json.loads(await resp.content.readline()))
                self.connected.set()
                deliver, iid = self.deliver, self.instance_id
                rest = b""
                # Whole reads, split here: one call per socket read, not one per line.
                async for data in resp.content.iter_any():
                    lines = (rest + data).split(b"\n")
                    rest = lines.pop()
                    for line in lines:
                        if line:
                            rid, item = parse(line)
                            deliver(iid, rid, item)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            why = f"event channel broken: {type(exc).__name__}: {exc}".rstrip(": ")
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self.connected.clear()
            if not cancelled:
                self.lost(self.instance_id, why)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
