"""The 100-token handoff micro-benchmark (PDD.md, E7): shipping RLD's KV vs Extend-Decode.

Runs the ``pdd`` scenario's deployment (always relay, one-shot handoff; ``--transfer kv``
or Extend-Decode) in its emulated topology (WAN 10 Gbit/s, 15 ms one way, the scenario's
jitter, byte scale 1/1000) and PRINTS, per mode, the handoff payload and its latency from
RLD's send to MD's acknowledgement (both on RLD's clock).

The published comparison is about exposure: a KV handoff is megabytes of KV on the WAN, so
it waits behind the prompt KV of other requests in the WAN's bulk class and its latency
spreads; an Extend-Decode handoff is 1-2 KB of token ids in the control class and sees
only the link's delay and jitter. So the probes run under *background WAN load*
(``--load`` requests/s of ``--bg-tokens`` uncached tokens each, default about half the
WAN) as well as on an idle WAN (``--load 0``).

    .venv/bin/python bench/bench_handoff.py --n 30            # under load
    .venv/bin/python bench/bench_handoff.py --n 30 --load 0   # idle WAN

Needs root and iptables/NFQUEUE, like ``pddbench replay``. No pass/fail: figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_servers import (
    KVB,
    Outcome,
    body_bytes,
    emulated_pdd,
    pct,
    run_emulated,
    stream_request,
    tokens_json,
)

WAN_BYTES_PER_S = 10e9 / 8  # the pdd scenario's WAN, unscaled
PROBE_TOKENS = 36_000  # MD lands ~75-100 RLD steps after RLD on an idle WAN
PROBE_OUTPUT = 400
DEFAULT_LOAD = 0.6  # background requests/s: with DEFAULT_BG_TOKENS, ~45% of the WAN
DEFAULT_BG_TOKENS = 20_000
FILL_S = 10.0  # background load runs this long before the first probe


def random_prompt(rng: random.Random, n: int) -> str:
    return tokens_json([rng.randrange(1, 150_000) for _ in range(n)])


async def background(
    http: aiohttp.ClientSession,
    url: str,
    rate: float,
    tokens: int,
    stop: asyncio.Event,
    out: list[Outcome],
) -> None:
    """Poisson arrivals of fresh (uncached) prompts until ``stop``: prompt KV on the WAN."""
    rng = random.Random(11)
    tasks: set[asyncio.Task[None]] = set()
    k = 0

    async def one(rid: str, body: bytes) -> None:
        out.append(await stream_request(http, url, body, rid, 16))

    while True:
        with contextlib.suppress(TimeoutError):  # the next arrival, unless stopped first
            await asyncio.wait_for(stop.wait(), rng.expovariate(rate))
        if stop.is_set():
            break
        task = asyncio.create_task(one(f"bg{k}", body_bytes(random_prompt(rng, tokens), 16)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        k += 1
    if tasks:
        await asyncio.gather(*tasks)


def run_mode(transfer: str, n: int, load: float, bg_tokens: int, wan: dict[str, Any] | None):
    dep = emulated_pdd(
        routing={"pipeline_policy": "always-relay"},
        handoff={"schedule": "one-shot", "transfer": transfer},
    )

    async def run(url: str) -> tuple[list[Outcome], list[Outcome], float]:
        """The probes, the background requests, and how long the background ran."""
        probes: list[Outcome] = []
        bg: list[Outcome] = []
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            stop = asyncio.Event()
            loader = None
            if load > 0:
                loader = asyncio.create_task(background(http, url, load, bg_tokens, stop, bg))
                await asyncio.sleep(FILL_S)  # let the WAN fill
            t0 = time.monotonic()
            rng = random.Random(7)
            for k in range(n):
                body = body_bytes(random_prompt(rng, PROBE_TOKENS), PROBE_OUTPUT)
                probes.append(
                    await stream_request(http, url, body, f"h{transfer}{k}", PROBE_OUTPUT)
                )
            stop.set()
            if loader is not None:
                await loader
            bg_seconds = time.monotonic() - t0 + (FILL_S if loader is not None else 0.0)
        return probes, bg, bg_seconds

    return run_emulated(dep, run, wan=wan)


def latency_line(lat: list[float]) -> str:
    return (
        f"mean {statistics.mean(lat):6.1f} ms, std {statistics.pstdev(lat):5.1f} ms, "
        f"p50 {pct(lat, 50):6.1f}, p90 {pct(lat, 90):6.1f}, max {max(lat):6.1f} ms"
    )


def report(
    transfer: str, probes: list[Outcome], bg: list[Outcome], bg_seconds: float, bg_tokens: int
) -> tuple[list[float], list[float]]:
    """Print one mode's figures; return its latencies (all, and 70-130-token handoffs)."""
    failed = [o for o in probes + bg if not o.ok]
    for o in failed[:5]:
        print(f"  request {o.rid} failed: {o.error}")
    hs = [
        o.pdd["handoff"]
        for o in probes
        if o.ok and o.pdd and o.pdd["handoff"] and o.pdd["handoff"]["seam"]
    ]
    label = "KV handoff    " if transfer == "kv" else "Extend-Decode "
    if not hs:
        print(f"{label} no completed handoff ({len(failed)} failed requests)")
        return [], []
    toks = [h["tokens"] for h in hs]
    payload = [h["modelled_payload_bytes"] for h in hs]
    real = [h["payload_bytes"] for h in hs]
    lat = [(h["end"] - h["start"]) * 1e3 for h in hs]
    near100 = [x for x, t in zip(lat, toks, strict=True) if 70 <= t <= 130]
    per100 = [p / max(t, 1) * 100 for p, t in zip(payload, toks, strict=True)]
    load = ""
    if bg:
        # every background prompt's KV crosses the WAN (MD always receives it)
        busy = len(bg) * bg_tokens * KVB / WAN_BYTES_PER_S / max(bg_seconds, 1e-9) * 100
        load = f" | background: {len(bg)} requests, WAN ~{busy:.0f}% busy with them"
    print(
        f"{label} n={len(hs)}/{len(probes)}, {len(failed)} failed requests | tokens handed over "
        f"mean {statistics.mean(toks):.0f} (min {min(toks)}, max {max(toks)}) | payload per 100 "
        f"tokens (modelled) {statistics.mean(per100) / 1e3:8.1f} KB, on the wire "
        f"{statistics.mean(real) / 1e3:6.2f} KB (scaled){load}"
    )
    print(f"{'':14s} latency RLD send -> MD ack, all:          {latency_line(lat)}")
    if len(near100) >= 2:
        print(f"{'':14s} 70-130-token handoffs only (n={len(near100):2d}): {latency_line(near100)}")
    return lat, near100


def bench_handoff(n: int, jitter_ms: float | None, load: float, bg_tokens: int) -> None:
    util = load * bg_tokens * KVB / WAN_BYTES_PER_S
    jitter = "as the scenario (+-3 ms)" if jitter_ms is None else f"+-{jitter_ms:g} ms"
    print(
        "== 100-token handoff micro-benchmark (E7): emulated pdd topology, WAN 10 Gbit/s "
        f"15 ms one way, jitter {jitter}, "
        f"byte scale 1/1000; background load {load:g} req/s x {bg_tokens} uncached tokens "
        f"(offered ~{util * 100:.0f}% of the WAN) =="
    )
    wan = None if jitter_ms is None else {"jitter_ms": jitter_ms}
    lats: dict[str, tuple[list[float], list[float]]] = {}
    for transfer in ("kv", "extend"):
        probes, bg, bg_seconds = run_mode(transfer, n, load, bg_tokens, wan)
        lats[transfer] = report(transfer, probes, bg, bg_seconds, bg_tokens)
    for i, what in enumerate(("all handoffs", "70-130-token handoffs")):
        kv, ext = lats.get("kv", ([], []))[i], lats.get("extend", ([], []))[i]
        if len(kv) >= 2 and len(ext) >= 2:
            ratio = statistics.pstdev(kv) / max(statistics.pstdev(ext), 1e-9)
            print(f"std ratio KV / Extend-Decode, {what}: {ratio:.1f}x (bar: >= 5x)")
    print(
        "(PDD report: KV 4,649 KB / 185 ms mean / 512.6 ms peak; Extend-Decode 1.5 KB / "
        "305 ms mean / std 4.8 ms)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=20, help="probe handoffs per mode")
    ap.add_argument(
        "--load", type=float, default=DEFAULT_LOAD, help="background requests/s (0: idle WAN)"
    )
    ap.add_argument(
        "--bg-tokens",
        type=int,
        default=DEFAULT_BG_TOKENS,
        help="uncached tokens per background request",
    )
    ap.add_argument(
        "--jitter-ms", type=float, default=None, help="WAN jitter (default: scenario's)"
    )
    a = ap.parse_args()
    bench_handoff(a.n, a.jitter_ms, a.load, a.bg_tokens)


if __name__ == "__main__":
    main()
