"""Test support: build small deployments, run them in-process, and act as a client."""

from __future__ import annotations

import json
import random
import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pddbench.servers.config import DeploymentConfig
from pddbench.servers.host import Host
from pddbench.servers.tokens import output_token

from .slowlink import SlowLink

VOCAB = 163840  # pdd-flagship-1t


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(n: int) -> int:
    """A base port below the ephemeral range with ``n`` consecutive free ports."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - n)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports")


def deployment(
    architecture: str,
    roles: dict[str, int],
    *,
    hardware: str = "zero-compute",
    step_overhead_s: float = 0.001,
    dc_of: dict[str, str] | None = None,
    sched_of: dict[str, dict[str, Any]] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """A deployment dict on loopback with port 0 everywhere (single process)."""
    short = {
        "prefill": "p",
        "decode": "d",
        "relay-decode": "rld",
        "main-decode": "md",
        "colocated": "c",
    }
    dc_of = dc_of or {"main-decode": "dc-b"}
    instances: list[dict[str, Any]] = [{"id": "router", "role": "router", "address": "127.0.0.1:0"}]
    for role, n in roles.items():
        for k in range(n):
            instances.append(
                {
                    "id": f"{short[role]}{k}",
                    "role": role,
                    "address": "127.0.0.1:0",
                    "hardware": hardware,
                    "chips": 1,
                    "datacenter": dc_of.get(role, "dc-a"),
                }
            )
            if sched_of and role in sched_of:
                instances[-1]["scheduler"] = {"chunk_tokens": 2048, **sched_of[role]}
    d: dict[str, Any] = {
        "name": f"test-{architecture}",
        "architecture": architecture,
        "byte_scale": 1e-3,
        "scheduler": {"step_overhead_s": step_overhead_s, "chunk_tokens": 2048},
        "instances": instances,
    }
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k] = {**d[k], **v}
        else:
            d[k] = v
    return d


@asynccontextmanager
async def kv_receiver():
    """A loopback KV receiver (``receive_kv``); yields the KvTarget of a WAN transfer to it."""
    from aiohttp import web

    from pddbench.servers import protocol as proto
    from pddbench.servers.kvlink import receive_kv

    async def h_kv(request: web.Request) -> web.Response:
        await receive_kv(request)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/internal/kv/{rid}", h_kv)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        yield proto.KvTarget(instance="d0", address=f"127.0.0.1:{port}", skip_tokens=0, path="wan")
    finally:
        await runner.cleanup()


@asynccontextmanager
async def running(spec: dict[str, Any], slow: dict[str, dict[str, float]] | None = None):
    """Run a deployment in this loop; instances named in ``slow`` sit behind a SlowLink.

    Yields (host, front door URL, links by instance id).
    """
    slow = slow or {}
    links: dict[str, SlowLink] = {}
    spec = json.loads(json.dumps(spec))
    for inst in spec["instances"]:
        if inst["id"] in slow:
            port = free_port()
            inst["listen"] = f"127.0.0.1:{port}"
            link = SlowLink(f"127.0.0.1:{port}", **slow[inst["id"]])
            inst["address"] = await link.start()
            links[inst["id"]] = link
    dep = DeploymentConfig.model_validate(spec)
    host = Host(dep)
    await host.start()
    try:
        assert host.front_door is not None
        yield host, host.front_door, links
    finally:
        await host.stop()
        for link in links.values():
            await link.stop()


@dataclass
class Completion:
    status: int
    ids: list[int] = field(default_factory=list)
    chunks: int = 0
    finish_reason: str | None = None
    pdd: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False
    headers: dict[str, str] = field(default_factory=dict)


async def complete(
    http: aiohttp.ClientSession,
    url: str,
    prompt: list[int],
    max_tokens: int,
    rid: str,
    *,
    stream: bool = True,
    **extra: Any,
) -> Completion:
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    async with http.post(url + "/v1/completions", json=body, headers={"X-Request-Id": rid}) as r:
        out = Completion(r.status, headers=dict(r.headers))
        if r.status != 200:
            out.error = (await r.json())["error"]["message"]
            return out
        if not stream:
            obj = await r.json()
            out.ids = obj["choices"][0]["token_ids"]
            out.finish_reason = obj["choices"][0]["finish_reason"]
            out.pdd, out.usage, out.done = obj["pdd"], obj["usage"], True
            return out
        async for raw in r.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                out.done = True
                break
            obj = json.loads(data)
            if "error" in obj:
                out.error = obj["error"]["message"]
                break
            out.chunks += 1
            if obj["choices"]:
                ch = obj["choices"][0]
                out.ids.extend(ch["token_ids"])
                if ch["finish_reason"] is not None:
                    out.finish_reason = ch["finish_reason"]
            else:
                out.pdd = obj.get("pdd")
                out.usage = obj.get("usage")
    return out


def expected(rid: str, n: int, seed: int = 0) -> list[int]:
    return [output_token(seed, rid, i, VOCAB) for i in range(n)]


def agentic_prompts(
    rng: random.Random,
    sessions: int,
    turns: int,
    *,
    system: int = 512,
    step: int = 300,
    first: int | None = None,
) -> list[list[int]]:
    """Prompts of multi-turn sessions sharing a system prompt (later turns extend earlier).

    Turn 0 adds ``first`` (default ``step``) new tokens to the system prompt, later turns
    ``step`` each.
    """
    sys_prompt = [rng.randrange(100, 150000) for _ in range(system)]
    out: list[list[int]] = []
    for _ in range(sessions):
        ctx = list(sys_prompt)
        for j in range(turns):
            n = first if (j == 0 and first is not None) else step
            ctx = ctx + [rng.randrange(100, 150000) for _ in range(n)]
            out.append(list(ctx))
    return out
