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
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from pddbench.harness.engines.kvtcp.node import ask
from pddbench.harness.engines.kvtcp.wire import Kind, WireError
from pddbench.harness.engines.pdfront_request import RequestRun, UpstreamError
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

ROLES = ("P", "D", "RLD", "MD")
AFFINITY_BLOCKS = 1 << 16  # per instance: far above what the tiny model's cache holds
PROBE_S = 1.0  # how often a member that is down is asked for its /health


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
    down: set[str] = field(default_factory=set)
    probes: set[asyncio.Task[None]] = field(default_factory=set)

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
        """The members of ``role`` not marked down (a connection to one failed and its
        ``/health`` has not answered since)."""
        return [m for m in self.cfg.of(role) if m.name not in self.down]

    def mark_down(self, m: Member) -> None:
        """Leave ``m`` out until its ``/health`` answers again (probed, not tried with a
        request)."""
        if m.name not in self.down:
            self.down.add(m.name)
            task = asyncio.get_running_loop().create_task(self._probe(m))
            self.probes.add(task)
            task.add_done_callback(self.probes.discard)

    async def _probe(self, m: Member) -> None:
        assert self.session is not None
        while True:
            await asyncio.sleep(PROBE_S)
            try:
                timeout = aiohttp.ClientTimeout(total=2.0)
                async with self.session.get(f"http://{m.http}/health", timeout=timeout) as r:
                    if r.status == 200:
                        break
            except (aiohttp.ClientError, TimeoutError):
                continue
        self.down.discard(m.name)

    def pick(self, role: str, hashes: list[int]) -> tuple[Member, int]:
        members = {m.name: m for m in self.up(role)}
        if not members:
            raise UpstreamError(f"no {role} instance up")
        loads = {n: float(self.loads[n]) for n in members}
        matched = {n: self.affinity.match(n, hashes) for n in members}
        name = choose_instance(loads, matched, len(hashes), SelectionPolicy())
        return members[name], matched[name]

    def decide(self, prompt_len: int, md_cached: int, relay: bool) -> Pipeline:
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
        run = RequestRun(self, body, prompt, request)
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
