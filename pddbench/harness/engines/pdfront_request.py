"""One request through the real-engine front door (:mod:`pddbench.harness.engines.pdfront`).

Owns a request's way through the engines: P's prefill and push, the watch on each
receiver's transfer, the decode on D / MD, or RLD's eager decode and the Extend-Decode
handoff to MD; the stream the client sees and the ``pdd`` story in its last chunk. Which
instances and which pipeline are the front door's decisions (:class:`Front`), not made here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import aiohttp
from aiohttp import web

from pddbench.harness.drive.stream_records import ChunkList, SseReader
from pddbench.harness.engines.kvtcp.node import ask
from pddbench.harness.engines.kvtcp.wire import Kind, WireError, block_keys
from pddbench.harness.engines.pdfront_core import Front, Member, UpstreamError
from pddbench.servers.routing import Pipeline
from pddbench.servers.story import RequestStory


class RequestRun:
    """One request through the front door."""

    def __init__(self, front: Front, body: dict, prompt: list[int], request: web.Request) -> None:
        self.front = front
        self.cfg = front.cfg
        self.body = body
        self.prompt = prompt
        self.request = request
        self.rid = f"front-{next(front.ids)}"
        self.max_tokens = int(body.get("max_tokens") or 16)
        self.stream = bool(body.get("stream", False))
        self.story = RequestStory(
            request_id=self.rid,
            seed=0,
            vocab_size=0,
            byte_scale=1.0,
            prompt_tokens=len(prompt),
            router="front",
            arrival=time.monotonic(),
        )
        self.story.clocks["front"] = front.anchor.to_json()
        self.tokens: list[int] = []
        self.text: list[str] = []
        self.response: web.StreamResponse | None = None
        self.transfer = f"{self.rid}-{time.time_ns()}"  # unique across front-door restarts
        self.watches: dict[str, asyncio.Task[None]] = {}
        self.states: dict[str, str] = {}
        self.expected_bytes = 0.0
        self.cached = 0
        self.handing_off = False

    # -- the pipelines --------------------------------------------------------------------
    async def go(self) -> web.StreamResponse:
        front, cfg = self.front, self.cfg
        keys = block_keys(self.prompt, cfg.block)
        hashes = [int.from_bytes(k[:8], "big") for k in keys]
        used: list[Member] = []
        try:
            p, _ = front.pick("P", hashes)
            decode_role = "D" if cfg.mode == "pd" else "MD"
            relay_up = bool(front.up("RLD"))
            if cfg.mode == "pdd" and not front.up("MD") and relay_up:
                # MD is down: P->RLD, said so in the story, rather than failing every request
                main, pipeline, decode_role = (
                    front.pick("RLD", hashes)[0],
                    Pipeline.RLD_ONLY,
                    "RLD",
                )
                self.story.routing["reason"] = "no MD instance up: finished on RLD"
            else:
                main, main_blocks = front.pick(decode_role, hashes)
                md_cached = main_blocks * cfg.block
                self.expected_bytes = max(0, len(self.prompt) - md_cached) * cfg.kv_bytes_per_token
                pipeline = front.decide(len(self.prompt), md_cached, relay_up)
            rld = front.pick("RLD", hashes)[0] if pipeline is Pipeline.RELAY else None
            self.story.pipeline = pipeline.value
            self.story.routed = time.monotonic()
            self.story.instances = {"P": p.name, decode_role: main.name}
            if rld is not None:
                self.story.instances["RLD"] = rld.name
            dests = [(decode_role, main)] + ([("RLD", rld)] if rld is not None else [])
            used = [p, main, *([rld] if rld else [])]
            for m in used:
                front.loads[m.name] += 1
            await self._prefill(p, dests)
            if rld is None:
                await self._decode(main, decode_role, self.prompt, self.max_tokens)
            else:
                await self._relay(rld, main)
            front.affinity.insert(main.name, hashes)
            front.affinity.insert(p.name, hashes)
            front.served[pipeline.value] = front.served.get(pipeline.value, 0) + 1
            return await self._finish()
        except (UpstreamError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            front.failed += 1
            return await self._fail(str(exc) or type(exc).__name__)
        finally:
            for m in used:
                front.loads[m.name] -= 1
            for task in self.watches.values():
                task.cancel()

    async def _prefill(self, p: Member, dests: list[tuple[str, Member]]) -> None:
        """P computes the prompt (one token, discarded) and pushes its KV to ``dests``; each
        destination's receiver is watched for the transfer (one id: each node keeps its own
        record of it)."""
        for label, m in dests:
            self.watches[label] = asyncio.create_task(self._watch(label, m, p))
        params = {"push": [m.kv for _, m in dests], "transfer": self.transfer}
        body = {**self.body, "max_tokens": 1, "stream": False, "min_tokens": 0}
        body.pop("stream_options", None)
        body["kv_transfer_params"] = {"pddbench": params}
        self.story.prefill["start"] = time.monotonic()
        out = await self._post(p, body)
        end = time.monotonic()
        usage = out.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        self.cached = int(details.get("cached_tokens") or 0)
        computed = len(self.prompt) - self.cached
        self.story.prefill.update(end=end, cached=self.cached, uncached=computed)
        self.front.prefill.observe(end - self.story.prefill["start"], computed)

    async def _watch(self, label: str, dest: Member, p: Member) -> None:
        """The transfer to ``dest`` as its receiver timed it (story + link estimator)."""
        wan = dest.site != p.site
        link = self.front.link
        expected = self.expected_bytes
        if wan:
            link.started(expected)
        status: dict[str, Any] = {}
        try:
            header = {"transfer": self.transfer, "timeout_s": self.cfg.wait_s}
            frame = await asyncio.to_thread(
                ask, dest.kv, Kind.WAIT, header, b"", self.cfg.wait_s + 5
            )
            status = frame.header
        except (OSError, WireError) as exc:
            status = {"state": "failed", "reason": str(exc)}
        moved = int(status.get("payload_bytes") or 0)
        started, ended = status.get("started"), status.get("ended")
        if wan and status.get("state") == "done" and started is not None and ended is not None:
            link.in_flight_bytes = max(0.0, link.in_flight_bytes + moved - expected)
            link.finished(moved, start=started, first_byte=started, last_byte=ended)
        elif wan:
            link.abandoned(expected)
        path = "wan" if wan else "local"
        self.story.kv_transfers.append(
            {
                "to": dest.name,
                "label": label,
                "path": path,
                "bytes": moved,
                "modelled_bytes": moved,
                "wire_bytes": int(status.get("wire_bytes") or 0),
                "blocks": status.get("blocks"),
                "skipped_blocks": status.get("skipped"),
                "start": started,
                "end": ended,
                "state": status.get("state"),
                "reason": status.get("reason"),
            }
        )
        self.story.landed[label] = {"start": started, "end": ended, "path": path}
        self.states[label] = str(status.get("state"))

    async def _relay(self, rld: Member, md: Member) -> None:
        """RLD streams from the local KV until MD holds the prompt's; then Extend-Decode."""
        relay = asyncio.create_task(self._decode(rld, "RLD", self.prompt, self.max_tokens))
        md_watch = self.watches["MD"]
        done, _ = await asyncio.wait({relay, md_watch}, return_when=asyncio.FIRST_COMPLETED)
        if relay in done:
            relay.result()  # RLD finished the whole output (or failed)
            return
        if self.states.get("MD") != "done":
            await relay  # MD never got the KV: RLD finishes the request
            return
        self.handing_off = True  # RLD's loop stops at its next chunk, whole chunks only,
        await relay  # and leaving its stream closes it: vLLM aborts the request
        k = len(self.tokens)
        self.story.md_ready = self.story.landed["MD"].get("end")
        if k >= self.max_tokens:
            return
        self.story.handoff_mode = "extend-decode"
        batch: dict[str, Any] = {"t_send": time.monotonic(), "start": 0, "end": k, "final": True}
        self.story.handoff_batches.append(batch)
        await self._decode(md, "MD", self.prompt + self.tokens, self.max_tokens - k)
        batch["t_ack"] = self.story.extends[0]["end"] if self.story.extends else None

    async def _decode(self, m: Member, label: str, prompt: list[int], n: int) -> None:
        params = {"load": self.transfer, "wait_s": self.cfg.wait_s}
        body = {
            **self.body,
            "prompt": prompt,
            "max_tokens": n,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "kv_transfer_params": {"pddbench": params},
        }
        if "min_tokens" in self.body:
            body["min_tokens"] = n
        sent = time.monotonic()
        async with self._request(m, body) as resp:
            if resp.status != 200:
                raise UpstreamError(f"{m.name}: HTTP {resp.status}: {(await resp.text())[:200]}")
            chunks = ChunkList()
            reader = SseReader(chunks)
            async for data in resp.content.iter_any():
                stop = reader.feed(time.monotonic(), data)
                for chunk in chunks.take():
                    if label == "RLD" and self.handing_off:
                        break
                    await self._relay_chunk(chunk, label, sent)
                if reader.server_error is not None:
                    raise UpstreamError(f"{m.name}: {reader.server_error}")
                if stop or (label == "RLD" and self.handing_off):
                    break
        if len(self.tokens) < self.max_tokens and not (label == "RLD" and self.handing_off):
            raise UpstreamError(f"{m.name}: stream ended after {len(self.tokens)} tokens")

    async def _relay_chunk(self, chunk: dict[str, Any], label: str, sent: float) -> None:
        """One upstream chunk's tokens: into the story and on to the client."""
        for choice in chunk.get("choices") or []:
            ids = choice.get("token_ids") or []
            if not ids:
                continue
            now = time.monotonic()
            if not self.tokens:
                self.story.first_token = now
                self.story.first_token_origin = label
            if label == "MD" and self.story.handoff_mode and not self.story.extends:
                self.story.extends.append({"start": sent, "end": now})
            self.tokens.extend(ids)
            self.text.append(choice.get("text") or "")
            origin = self.story.tokens_by_origin
            origin[label] = origin.get(label, 0) + len(ids)
            self.story.last_token = now
            self.story.finish_origin = label
            await self._emit(ids, choice.get("text") or "")

    async def _post(self, m: Member, body: dict) -> dict:
        async with self._request(m, body) as resp:
            if resp.status != 200:
                raise UpstreamError(f"{m.name}: HTTP {resp.status}: {(await resp.text())[:200]}")
            return await resp.json()

    @contextlib.asynccontextmanager
    async def _request(self, m: Member, body: dict) -> AsyncIterator[aiohttp.ClientResponse]:
        """A POST to ``m``; a connection that fails or drops marks ``m`` down. A pooled
        connection the server had already closed (disconnected before any answer) is
        tried once more on a fresh one: nothing of the request was served."""
        assert self.front.session is not None
        url = f"http://{m.http}/v1/completions"
        resp: aiohttp.ClientResponse | None = None
        for attempt in (0, 1):
            try:
                resp = await self.front.session.post(url, json=body)
                break
            except aiohttp.ServerDisconnectedError as exc:
                if attempt:
                    self._down(m, exc)
            except aiohttp.ClientConnectionError as exc:
                self._down(m, exc)
        assert resp is not None
        try:
            async with resp:
                yield resp
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            self._down(m, exc)

    def _down(self, m: Member, exc: Exception) -> NoReturn:
        self.front.mark_down(m)
        raise UpstreamError(f"{m.name}: {type(exc).__name__}: {exc}") from None

    # -- the client's side ----------------------------------------------------------------
    async def _open(self) -> web.StreamResponse:
        if self.response is None:
            self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await self.response.prepare(self.request)
        return self.response

    def _chunk(self, choices: list[dict], **more: Any) -> bytes:
        obj = {"id": self.rid, "object": "text_completion", "choices": choices, **more}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    async def _emit(self, ids: list[int], text: str) -> None:
        if not self.stream:
            return
        resp = await self._open()
        await resp.write(self._chunk([{"index": 0, "text": text, "token_ids": ids}]))

    def _usage(self) -> dict:
        return {
            "prompt_tokens": len(self.prompt),
            "completion_tokens": len(self.tokens),
            "total_tokens": len(self.prompt) + len(self.tokens),
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }

    async def _finish(self) -> web.StreamResponse:
        self.story.done = time.monotonic()
        self.story.finish_reason = "length"
        await asyncio.gather(*self.watches.values(), return_exceptions=True)
        story = self.story.to_json()
        if not self.stream:
            choice = {"index": 0, "text": "".join(self.text), "token_ids": self.tokens}
            return web.json_response(
                {"id": self.rid, "choices": [choice], "usage": self._usage(), "pdd": story}
            )
        resp = await self._open()
        await resp.write(self._chunk([], usage=self._usage(), pdd=story))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _fail(self, message: str) -> web.StreamResponse:
        self.story.error = message
        if self.response is None:
            return web.json_response({"error": {"message": message}}, status=502)
        err = {"error": {"message": message, "type": "upstream"}}
        await self.response.write(b"data: " + json.dumps(err).encode() + b"\n\n")
        await self.response.write_eof()
        return self.response
