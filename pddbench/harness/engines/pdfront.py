"""``python -m pddbench.harness.engines.pdfront``: the front door of real-engine PD and PDD.

It speaks the OpenAI completions API to the client and drives real engines (vLLM with the
pddbench KV connector, :mod:`pddbench.harness.engines.kvtcp`) behind it:

* ``--mode pd``: P prefills (``max_tokens=1``) and pushes the prompt's KV to the chosen D;
  D loads it and streams every token (P->D).
* ``--mode pdd``: the project's own routing decisions (:func:`decide_pipeline`,
  :class:`LinkEstimator`, :func:`choose_instance` with an :class:`AffinityIndex`) choose,
  per request, P->MD (P pushes to MD over the WAN; MD streams) or P->RLD->MD (P pushes to
  the RLD beside it *and* to MD; RLD decodes at once from the local KV and streams the
  first tokens; when MD holds the prompt's KV, RLD is stopped and MD receives the prompt
  plus RLD's ``k`` tokens, loads the prompt's KV and computes only the ``k``
  (Extend-Decode), and continues the one stream the client sees).

The last chunk carries the ``pdd`` story (:class:`RequestStory`, the reference servers'
own shape): pipeline, instances, P's prefill, each KV transfer as its receiver timed it,
the handoff, tokens by origin; the harness reads the TTFT decomposition and WAN bytes from
it as it does for the reference servers. ``/metrics`` serves each member's KV counters
(``pdd_kv_bytes_{sent,received}_total{instance=...}``) read from its node. A member that
fails mid-request fails that request (an SSE error event after the first byte, a 502
before), never the front door.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from pddbench.harness.engines.kvtcp.node import ask
from pddbench.harness.engines.kvtcp.wire import Kind, WireError, block_keys
from pddbench.servers.clock import ClockAnchor
from pddbench.servers.routing import (
    AffinityIndex,
    LinkEstimator,
    Pipeline,
    PipelineInputs,
    PipelinePolicy,
    RoutingPolicy,
    SelectionPolicy,
    choose_instance,
    decide_pipeline,
)
from pddbench.servers.story import RequestStory

ROLES = ("P", "D", "RLD", "MD")
AFFINITY_BLOCKS = 1 << 16  # per instance: far above what the tiny model's cache holds
DOWN_S = 10.0  # a member whose connection failed is left out this long, then tried again


@dataclass(frozen=True)
class Member:
    """One engine behind the front door: its role, site, HTTP and KV node addresses."""

    role: str
    name: str
    site: str
    http: str  # host:port of its OpenAI server
    kv: str  # host:port of its KV node

    @classmethod
    def parse(cls, text: str) -> Member:
        """``ROLE:NAME:SITE:HTTPHOST:HTTPPORT:KVHOST:KVPORT``."""
        parts = text.split(":")
        if len(parts) != 7 or parts[0] not in ROLES:
            raise ValueError(f"bad --member {text!r} (want ROLE:NAME:SITE:HOST:PORT:KVHOST:KVPORT)")
        role, name, site, h, p, kh, kp = parts
        return cls(role, name, site, f"{h}:{p}", f"{kh}:{kp}")


@dataclass
class FrontConfig:
    mode: str  # "pd" | "pdd"
    members: list[Member]
    block: int = 128  # the engines' KV block (affinity and the decision's cached tokens)
    kv_bytes_per_token: float = 1024.0
    wan_mbit: float = 100.0  # the line's rate: the link estimator's prior and ceiling
    ttft_target_s: float = 1.0
    pipeline: PipelinePolicy = PipelinePolicy.HIT_RATE_AWARE
    wait_s: float = 30.0  # longest a decode side waits for a transfer before computing

    def of(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role]


@dataclass
class _Prefill:
    """The front door's running estimate of P's seconds per computed prompt token."""

    per_token_s: float = 2e-4
    samples: int = 0

    def observe(self, seconds: float, computed: int) -> None:
        if computed >= 64:
            x = seconds / computed
            self.per_token_s = x if not self.samples else 0.8 * self.per_token_s + 0.2 * x
            self.samples += 1


@dataclass
class Front:
    cfg: FrontConfig
    anchor: ClockAnchor = field(default_factory=ClockAnchor.take)
    loads: dict[str, int] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    down_until: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = {m.name: AFFINITY_BLOCKS for m in self.cfg.members}
        self.affinity = AffinityIndex(names)
        self.loads = {m.name: 0 for m in self.cfg.members}
        rate = self.cfg.wan_mbit * 1e6 / 8
        self.link = LinkEstimator(rate, ceiling_bytes_per_s=rate, min_bytes=256 * 1024)
        self.prefill = _Prefill()
        self.ids = itertools.count()
        self.session: aiohttp.ClientSession | None = None

    # -- choosing -------------------------------------------------------------------
    def up(self, role: str) -> list[Member]:
        """The members of ``role`` not marked down (a connection to one failed lately)."""
        now = time.monotonic()
        return [m for m in self.cfg.of(role) if self.down_until.get(m.name, 0.0) <= now]

    def mark_down(self, m: Member) -> None:
        self.down_until[m.name] = time.monotonic() + DOWN_S

    def _pick(self, role: str, hashes: list[int]) -> tuple[Member, int]:
        members = {m.name: m for m in self.up(role)}
        if not members:
            raise UpstreamError(f"no {role} instance up")
        loads = {n: float(self.loads[n]) for n in members}
        matched = {n: self.affinity.match(n, hashes) for n in members}
        name = choose_instance(loads, matched, len(hashes), SelectionPolicy())
        return members[name], matched[name]

    def _decide(self, prompt_len: int, md_cached: int, relay: bool) -> Pipeline:
        if self.cfg.mode == "pd":
            return Pipeline.PD
        uncached = max(0, prompt_len - md_cached)
        inputs = PipelineInputs(
            prompt_len=prompt_len,
            md_cached_tokens=md_cached,
            kv_bytes_per_token=self.cfg.kv_bytes_per_token,
            predicted_prefill_s=uncached * self.prefill.per_token_s,
            link=self.link,
            relay_available=relay,
        )
        policy = RoutingPolicy(pipeline=self.cfg.pipeline, ttft_target_s=self.cfg.ttft_target_s)
        return decide_pipeline(inputs, policy).pipeline

    # -- HTTP ---------------------------------------------------------------------------
    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"ok": True, "members": [m.name for m in self.cfg.members]})

    async def metrics(self, _: web.Request) -> web.Response:
        lines = [
            "# TYPE pdd_kv_bytes_sent_total counter",
            "# TYPE pdd_kv_bytes_received_total counter",
        ]
        for m in self.cfg.members:
            try:
                frame = await asyncio.to_thread(ask, m.kv, Kind.STATS, {}, b"", 2.0)
            except (OSError, WireError):
                continue
            c = frame.header
            lines.append(f'pdd_kv_bytes_sent_total{{instance="{m.name}"}} {c.get("bytes_sent", 0)}')
            lines.append(
                f'pdd_kv_bytes_received_total{{instance="{m.name}"}} {c.get("bytes_received", 0)}'
            )
            lines.append(
                f'pdd_kv_transfers_failed_total{{instance="{m.name}"}} '
                f"{c.get('transfers_failed', 0)}"
            )
        for pipeline, n in sorted(self.served.items()):
            lines.append(f'pdd_front_requests_total{{pipeline="{pipeline}"}} {n}')
        lines.append(f"pdd_front_requests_failed_total {self.failed}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            prompt = body.get("prompt") if isinstance(body, dict) else None
            if (
                not isinstance(prompt, list)
                or not prompt
                or not all(isinstance(t, int) for t in prompt)
            ):
                raise ValueError("prompt must be a non-empty list of token ids")
        except (ValueError, json.JSONDecodeError) as exc:
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        run = _Run(self, body, prompt, request)
        return await run.go()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)

        async def session(app: web.Application):  # type: ignore[no-untyped-def]
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            self.session = aiohttp.ClientSession(timeout=timeout)
            yield
            await self.session.close()

        app.cleanup_ctx.append(session)
        return app


class UpstreamError(Exception):
    """A member failed (refused, died, answered an error): the request fails, in one line."""


class _Run:
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
            p, _ = front._pick("P", hashes)
            decode_role = "D" if cfg.mode == "pd" else "MD"
            relay_up = bool(front.up("RLD"))
            if cfg.mode == "pdd" and not front.up("MD") and relay_up:
                # MD is down: P->RLD, said so in the story, rather than failing every request
                main, pipeline, decode_role = (
                    front._pick("RLD", hashes)[0],
                    Pipeline.RLD_ONLY,
                    "RLD",
                )
                self.story.routing["reason"] = "no MD instance up: finished on RLD"
            else:
                main, main_blocks = front._pick(decode_role, hashes)
                md_cached = main_blocks * cfg.block
                self.expected_bytes = max(0, len(self.prompt) - md_cached) * cfg.kv_bytes_per_token
                pipeline = front._decide(len(self.prompt), md_cached, relay_up)
            rld = front._pick("RLD", hashes)[0] if pipeline is Pipeline.RELAY else None
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
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]" or (label == "RLD" and self.handing_off):
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise UpstreamError(f"{m.name}: {chunk['error']}")
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
        if len(self.tokens) < self.max_tokens and not (label == "RLD" and self.handing_off):
            raise UpstreamError(f"{m.name}: stream ended after {len(self.tokens)} tokens")

    async def _post(self, m: Member, body: dict) -> dict:
        async with self._request(m, body) as resp:
            if resp.status != 200:
                raise UpstreamError(f"{m.name}: HTTP {resp.status}: {(await resp.text())[:200]}")
            return await resp.json()

    @contextlib.asynccontextmanager
    async def _request(self, m: Member, body: dict) -> AsyncIterator[aiohttp.ClientResponse]:
        """A POST to ``m``; a connection that fails or drops marks ``m`` down."""
        assert self.front.session is not None
        try:
            async with self.front.session.post(f"http://{m.http}/v1/completions", json=body) as r:
                yield r
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
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


def parse(argv: Sequence[str]) -> tuple[FrontConfig, str, int]:
    p = argparse.ArgumentParser(prog="python -m pddbench.harness.engines.pdfront")
    p.add_argument("--mode", choices=("pd", "pdd"), required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--member", action="append", default=[], help="ROLE:NAME:SITE:HOST:PORT:KVHOST:KVPORT"
    )
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--kv-bytes-per-token", type=float, default=1024.0)
    p.add_argument("--wan-mbit", type=float, default=100.0)
    p.add_argument("--ttft-target-s", type=float, default=1.0)
    p.add_argument(
        "--pipeline", choices=[x.value for x in PipelinePolicy], default="hit-rate-aware"
    )
    p.add_argument("--wait-s", type=float, default=30.0)
    a = p.parse_args(argv)
    members = [Member.parse(m) for m in a.member]
    cfg = FrontConfig(
        mode=a.mode,
        members=members,
        block=a.block,
        kv_bytes_per_token=a.kv_bytes_per_token,
        wan_mbit=a.wan_mbit,
        ttft_target_s=a.ttft_target_s,
        pipeline=PipelinePolicy(a.pipeline),
        wait_s=a.wait_s,
    )
    need = ("P", "D") if a.mode == "pd" else ("P", "MD")
    missing = [r for r in need if not cfg.of(r)]
    if missing:
        raise ValueError(f"--mode {a.mode} needs members of roles {', '.join(missing)}")
    return cfg, a.host, a.port


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg, host, port = parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"pdfront: {exc}", file=sys.stderr)
        return 2
    web.run_app(Front(cfg).app(), host=host, port=port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
