"""Faults: malformed requests, killed or unreachable instances, broken KV, client disconnect.

A failure must reach the client promptly as a clear error (HTTP 400 JSON before the stream,
one SSE error event after it started), never as a hang, and must free what the request
held on every instance.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.waiting import await_until

from .helpers import complete, deployment, expected, free_port, running

pytestmark = pytest.mark.timeout(120)


def test_malformed_requests_get_one_line_400s() -> None:
    spec = deployment("colocated", {"colocated": 1})

    async def main() -> list[tuple[int, str]]:
        out = []
        async with running(spec) as (_, url, _), aiohttp.ClientSession() as http:
            bodies: list[Any] = [
                b"{not json",
                {"prompt": "Hello there"},
                {"prompt": [[1, 2], [3]]},
                {"prompt": [1, -2, 3]},
                {"prompt": [1, 2.5]},
                {"prompt": []},
                {"prompt": [1, 2], "max_tokens": 0},
                {"prompt": [1, 2], "max_tokens": 2, "min_tokens": 3},
                {"prompt": [1, 2], "frobnicate": True},
                {"prompt": [1, 2], "stream": "yes"},
                {"prompt": [1] * 131000, "max_tokens": 1000},
                [1, 2, 3],
            ]
            for body in bodies:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                async with http.post(url + "/v1/completions", data=data) as r:
                    out.append((r.status, (await r.json())["error"]["message"]))
            async with http.post(
                url + "/v1/completions", json={"prompt": [1, 2]}, headers={"X-Request-Id": "a b"}
            ) as r:
                out.append((r.status, (await r.json())["error"]["message"]))
            ok = await complete(http, url, [1, 2, 3], 3, "fine")
            assert ok.ids == expected("fine", 3)
        return out

    results = asyncio.run(main())
    assert all(status == 400 for status, _ in results), results
    messages = [m for _, m in results]
    assert "not valid JSON" in messages[0]
    assert "text prompts are not supported" in messages[1] and "token IDs" in messages[1]
    assert "batched" in messages[2]
    assert "-2" in messages[3] and "2.5" in messages[4]
    assert "min_tokens" in messages[7] and "frobnicate" in messages[8]
    assert "context" in messages[10] and "JSON object" in messages[11]
    assert all("\n" not in m for m in messages)


def _idle(host: Any) -> bool:
    return all(
        not w.jobs and not w.engine.seqs and w.pool.private_tokens == 0 for w in host.workers
    )


@pytest.mark.parametrize("arch", ["pd", "pdd"])
def test_client_disconnect_frees_every_instance(arch: str) -> None:
    roles = (
        {"prefill": 1, "decode": 1}
        if arch == "pd"
        else {"prefill": 1, "relay-decode": 1, "main-decode": 1}
    )
    spec = deployment(arch, roles, step_overhead_s=0.002)
    if arch == "pdd":
        spec["routing"] = {"pipeline_policy": "always-relay"}

    async def main() -> None:
        async with running(spec) as (host, url, _), aiohttp.ClientSession() as http:
            body = {
                "prompt": list(range(5000)),
                "max_tokens": 100000,
                "stream": True,
                "ignore_eos": True,
            }
            for k in range(5):
                async with http.post(
                    url + "/v1/completions", json=body, headers={"X-Request-Id": f"gone{k}"}
                ) as r:
                    seen = 0
                    async for line in r.content:
                        seen += line.startswith(b"data:")
                        if seen >= 5:
                            break
                    r.close()  # the client goes away mid-stream
            await await_until(
                lambda: _idle(host) and not host.router.inflight,
                what="resources freed after disconnect",
                timeout_s=5,
            )
            ok = await complete(http, url, list(range(300)), 5, "after")
            assert ok.ids == expected("after", 5)

    asyncio.run(main())


def _start_host(
    tmp: Path, name: str, dep: dict[str, Any], serve: list[str]
) -> subprocess.Popen[str]:
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({"deployment": dep, "serve": serve}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"host {name} died: {proc.stderr.read() if proc.stderr else ''}")
        lines.append(line.strip())
        if line.strip() == "ready":
            return proc


async def _poll_running(
    http: aiohttp.ClientSession, addresses: dict[str, str], counts: dict[str, int]
) -> None:
    """Keep ``counts`` (running requests by instance) fresh from the instances' /health."""
    while True:
        for name, address in addresses.items():
            async with http.get(f"http://{address}/health") as r:
                counts[name] = (await r.json())["running"]
        await asyncio.sleep(0.02)  # the polling interval


def test_killed_instance_fails_its_requests_promptly(tmp_path: Path) -> None:
    dep = deployment(
        "pd",
        {"prefill": 1, "decode": 2},
        step_overhead_s=0.002,
        health_interval_s=0.2,
        health_timeout_s=0.5,
        health_failures=1,
    )
    ports = iter(free_port() for _ in range(10))
    for inst in dep["instances"]:
        inst["address"] = f"127.0.0.1:{next(ports)}"
    front = next(i for i in dep["instances"] if i["role"] == "router")["address"]
    decoders = {i["id"]: i["address"] for i in dep["instances"] if i["role"] == "decode"}
    a = _start_host(tmp_path, "a", dep, ["router", "p0", "d0"])
    b = _start_host(tmp_path, "b", dep, ["d1"])
    try:

        async def main() -> list[tuple[str, Any]]:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                url = f"http://{front}"
                for _ in range(100):  # the router saw d1 down before its process started
                    async with http.get(url + "/health") as r:
                        if (await r.json())["status"] == "ok":
                            break
                    await asyncio.sleep(0.05)
                tasks = [
                    asyncio.create_task(
                        complete(
                            http, url, [random.randrange(9999) for _ in range(2000)], 1500, f"k{k}"
                        )
                    )
                    for k in range(20)
                ]
                decoding = dict.fromkeys(decoders, 0)
                poller = asyncio.create_task(_poll_running(http, decoders, decoding))
                try:  # every request is streaming from its decoder, d1 has some
                    await await_until(
                        lambda: sum(decoding.values()) == 20 and decoding["d1"] > 0,
                        what="all 20 requests decoding, some on d1",
                    )
                finally:
                    poller.cancel()
                os.kill(b.pid, signal.SIGKILL)  # d1's process dies mid-stream
                t_kill = time.monotonic()
                done = await asyncio.wait_for(asyncio.gather(*tasks), 30)
                elapsed = time.monotonic() - t_kill
                assert elapsed < 8, elapsed  # not a hang (survivors need ~3 s of decode)
                for _ in range(200):  # the router's health checks have seen d1 go
                    async with http.get(url + "/health") as r:
                        if "d1" in (await r.json()).get("down", []):
                            break
                    await asyncio.sleep(0.05)
                after = [await complete(http, url, [5] * 500, 4, f"after{k}") for k in range(4)]
                return [(c.error or "", c) for c in done] + [(c.error or "", c) for c in after]

        results = asyncio.run(main())
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
    failed = [(e, c) for e, c in results[:20] if e]
    ok = [c for e, c in results[:20] if not e]
    summary = [(e[:60], len(c.ids)) for e, c in results]
    assert failed and ok, f"requests on both decoders expected: {summary}"
    for err, c in failed:
        assert "d1" in err and c.status == 200 and not c.done  # SSE error event, then the end
    assert all(c.ids == expected(c.pdd["request_id"], 1500) for c in ok)
    assert all(not e and c.pdd["instances"]["D"] == "d0" for e, c in results[20:])
    assert a.returncode == 0  # SIGTERM: clean exit


def test_unreachable_instance_is_detected_by_health_checks() -> None:
    spec = deployment(
        "pd",
        {"prefill": 1, "decode": 1},
        step_overhead_s=0.002,
        health_interval_s=0.2,
        health_timeout_s=0.5,
        health_failures=1,
    )

    async def main() -> None:
        async with running(spec, {"d0": {}}) as (host, url, links), aiohttp.ClientSession() as http:
            task = asyncio.create_task(complete(http, url, list(range(1000)), 5000, "bh"))
            d0 = next(w for w in host.workers if w.id == "d0")
            await await_until(lambda: d0.engine.running > 0, what="bh decoding on d0")
            links["d0"].blackhole()  # packets vanish mid-stream, no connection is closed
            t0 = time.monotonic()
            c = await asyncio.wait_for(task, 10)
            assert time.monotonic() - t0 < 3
            assert c.error is not None and "d0" in c.error and "unreachable" in c.error
            c2 = await asyncio.wait_for(complete(http, url, [1] * 100, 3, "bh2"), 5)
            assert c2.error is not None and "no healthy decode" in c2.error

    asyncio.run(main())


def test_broken_kv_connection_is_reported() -> None:
    spec = deployment("pd", {"prefill": 1, "decode": 1}, step_overhead_s=0.002)
    spec["byte_scale"] = 0.01  # 20K tokens -> 9.3 MB on the wire

    async def main() -> None:
        slow = {"d0": {"rate_bytes_per_s": 5e6}}
        async with running(spec, slow) as (host, url, links), aiohttp.ClientSession() as http:
            task = asyncio.create_task(complete(http, url, list(range(20000)), 50, "kvcut"))
            link = links["d0"]
            await await_until(
                lambda: max((f.bytes for f, _ in link._conns), default=0) > 1_000_000,
                what="1 MB of KV on the wire",
            )
            assert link.cut_busiest() > 1_000_000  # the KV connection, mid-transfer
            c = await asyncio.wait_for(task, 10)
            assert c.error is not None and "KV" in c.error, c.error
            await await_until(lambda: _idle(host), what="every instance idle", timeout_s=5)

    asyncio.run(main())
