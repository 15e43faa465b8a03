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
import json
import sys
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from pddbench.harness.engines.kvtcp.node import ask
from pddbench.harness.engines.kvtcp.wire import Kind, WireError
from pddbench.harness.engines.pdfront_core import Front, FrontConfig, Member
from pddbench.harness.engines.pdfront_request import RequestRun
from pddbench.servers.routing import PipelinePolicy


class FrontApp:
    """The front door's HTTP side: ``/v1/completions`` (one :class:`RequestRun` each),
    ``/health`` and ``/metrics`` (each member's KV counters, read from its node)."""

    def __init__(self, front: Front) -> None:
        self.front = front

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"ok": True, "members": [m.name for m in self.front.cfg.members]})

    async def metrics(self, _: web.Request) -> web.Response:
        lines = [
            "# TYPE pdd_kv_bytes_sent_total counter",
            "# TYPE pdd_kv_bytes_received_total counter",
        ]
        for m in self.front.cfg.members:
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
        for pipeline, n in sorted(self.front.served.items()):
            lines.append(f'pdd_front_requests_total{{pipeline="{pipeline}"}} {n}')
        lines.append(f"pdd_front_requests_failed_total {self.front.failed}")
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
        run = RequestRun(self.front, body, prompt, request)
        return await run.go()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)

        async def session(app: web.Application):  # type: ignore[no-untyped-def]
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            self.front.session = aiohttp.ClientSession(timeout=timeout)
            yield
            await self.front.session.close()

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
    web.run_app(FrontApp(Front(cfg)).app(), host=host, port=port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
