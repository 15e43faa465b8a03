"""Benchmarks of the reference servers: they PRINT figures (no pass/fail thresholds).

Sections (run one, or ``all``)::

    .venv/bin/python bench/bench_servers.py compute     # compute-model figures per profile
    .venv/bin/python bench/bench_servers.py handoff     # = bench/bench_handoff.py (E7)
    .venv/bin/python bench/bench_servers.py rld-share   # 64K in / 1K out, default PDD: RLD share
    .venv/bin/python bench/bench_servers.py perf        # 43 A + 32 B cluster at 50 req/s

WAN: ``handoff`` and ``rld-share`` run the ``pdd`` scenario's deployment (variants of it)
inside its emulated topology (pddbench.netem via pddbench.harness.deploy.systems: one namespace and
host process per instance, the client in the ``client`` namespace; WAN 10 Gbit/s, 15 ms
+-3 ms one way, rates and KV bytes scaled by emulation_scale 1000). They need root and
iptables/NFQUEUE, like ``pddbench replay``. ``perf`` runs on plain loopback (no link
emulation) with real processes: one router process, one (``--procs``) hosting the 43
type-A instances (P + RLD), one hosting the 32 type-B instances (MD); the worker hosts run
under SCHED_FIFO (``--realtime``, 0 to disable) so that their timers are not queued behind
the router and the load generator on this 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pddbench.servers import profiles  # noqa: E402
from pddbench.servers.compute import (  # noqa: E402
    Machine,
    decode_step_seconds,
    extend_step_seconds,
    kv_capacity_tokens,
    prefill_seconds,
)
from pddbench.servers.host import run_loop  # noqa: E402
from tests.servers.helpers import free_port_block  # noqa: E402

T = TypeVar("T")
FLAGSHIP = "pdd-flagship-1t"
KVB = 46490


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


# -- compute ------------------------------------------------------------------------------
def bench_compute() -> None:
    print("== compute model (pdd-flagship-1t, 16 chips per instance) ==")
    model = profiles.model(FLAGSHIP)
    for hw in ("h800-sxm", "h20"):
        m = Machine(profiles.hardware(hw), 16, model, 0.0005)
        print(
            f"{hw:9s} KV capacity {kv_capacity_tokens(m) / 1e6:5.2f} M tokens | "
            f"decode b=1@64K {decode_step_seconds(m, 1, 65536) * 1e3:5.1f} ms, "
            f"b=16@64K {decode_step_seconds(m, 16, 16 * 65536) * 1e3:5.1f} ms | "
            f"extend 100@64K {extend_step_seconds(m, 100, 65536) * 1e3:5.1f} ms | "
            f"prefill 64K cold {prefill_seconds(m, 65536, 0, 8192):5.2f} s, "
            f"6.5K on 58K cached {prefill_seconds(m, 6554, 58982, 8192) * 1e3:5.0f} ms"
        )
    m = Machine(profiles.hardware("h800-sxm"), 16, model, 0.0005)
    print("chunked prefill of a 64K prompt vs hit rate (chunk 8192; note the steps):")
    row = []
    for hit in (0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99):
        cached = int(65536 * hit)
        t = prefill_seconds(m, 65536 - cached, cached, 8192)
        row.append(f"{hit:.2f}:{t * 1e3:.0f}ms")
    print("  " + "  ".join(row))


# -- clients --------------------------------------------------------------------------------
@dataclass
class Outcome:
    rid: str
    ok: bool
    error: str | None
    tokens: int
    ttft: float | None
    e2e: float
    pdd: dict[str, Any] | None = None
    send: float = 0.0


async def stream_request(
    http: aiohttp.ClientSession, url: str, body: bytes, rid: str, expect: int
) -> Outcome:
    t0 = time.monotonic()
    ttft = None
    tokens = 0
    pdd = None
    err = None
    done = False
    try:
        async with http.post(
            url + "/v1/completions",
            data=body,
            headers={"X-Request-Id": rid, "Content-Type": "application/json"},
        ) as r:
            if r.status != 200:
                return Outcome(
                    rid,
                    False,
                    f"HTTP {r.status}: {(await r.text())[:200]}",
                    0,
                    None,
                    time.monotonic() - t0,
                    send=t0,
                )
            rest = b""
            async for data in r.content.iter_any():  # whole reads: cheap on the client
                events = (rest + data).split(b"\n\n")
                rest = events.pop()
                for line in events:
                    if line.startswith(b"data: [DONE]"):
                        done = True
                        break
                    i = line.find(b'"token_ids":[')
                    if i >= 0:
                        j = line.index(b"]", i)
                        n = line.count(b",", i, j) + 1 if j > i + 13 else 0
                        if n and ttft is None:
                            ttft = time.monotonic() - t0
                        tokens += n
                        continue
                    if not line.startswith(b"data: "):
                        continue
                    obj = json.loads(line[6:])
                    if "error" in obj:
                        err = obj["error"]["message"]
                        break
                    pdd = obj.get("pdd")
                if done or err:
                    break
    except (aiohttp.ClientError, OSError) as exc:
        err = f"{type(exc).__name__}: {exc}"
    ok = err is None and done and tokens == expect
    if err is None and not ok:
        err = f"incomplete: {tokens}/{expect} tokens, done={done}"
    return Outcome(rid, ok, err, tokens, ttft, time.monotonic() - t0, pdd, t0)


def body_bytes(prompt_json: str, max_tokens: int) -> bytes:
    return (
        '{"prompt":' + prompt_json + f',"max_tokens":{max_tokens},"min_tokens":{max_tokens},'
        '"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}'
    ).encode()


def tokens_json(ids: list[int]) -> str:
    return "[" + ",".join(map(str, ids)) + "]"


# -- emulated deployments (handoff and RLD-share benchmarks) --------------------------------------
def run_emulated(
    deployment: dict[str, Any],
    client: Callable[[str], Coroutine[Any, Any, T]],
    *,
    wan: dict[str, Any] | None = None,
) -> T:
    """Deploy ``deployment`` (a variant of the ``pdd`` scenario's) inside the scenario's
    emulated topology (pddbench.netem: one namespace per instance, the WAN link with its
    rate, delay and jitter; KV bytes and link rates scaled by ``emulation_scale``), run
    ``client(front_door)`` from the ``client`` namespace, tear everything down."""
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.harness.deploy.systems import deploy
    from pddbench.harness.drive.netns import run_in_client_netns
    from pddbench.harness.rundir.folder import RunPaths

    base = load_scenario("pdd")
    assert base.network is not None
    network = base.network.model_dump(exclude_unset=True)
    if wan:
        network["links"][0].update(wan)
    scenario = base.model_validate(
        {**base.model_dump(exclude_unset=True), "deployment": deployment, "network": network}
    )
    root = Path(tempfile.mkdtemp(prefix="pddbench-bench-"))
    paths = RunPaths(root)
    paths.logs.mkdir(parents=True, exist_ok=True)
    with deploy(scenario, paths, probe=False) as (info, ns, ready):

        def go() -> Any:
            ready()
            return run_loop(client(info.front_door))

        return run_in_client_netns(ns, go)


def emulated_pdd(**over: Any) -> dict[str, Any]:
    """The ``pdd`` scenario's deployment with some sections overridden."""
    from pddbench.harness.config.scenario import load_scenario

    dep = json.loads(json.dumps(load_scenario("pdd").deployment))
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(dep.get(k), dict):
            dep[k].update(v)
        else:
            dep[k] = v
    return dep


# -- RLD share --------------------------------------------------------------------------------
# Hit-rate mix of agentic traffic (PDD.md: 70-80% of requests hit > 95%, a few % low-hit,
# mean ~90%): (share, low, high) bins.
HIT_MIX = ((0.75, 0.95, 1.0), (0.13, 0.80, 0.95), (0.07, 0.40, 0.80), (0.05, 0.0, 0.2))


async def wan_idle(http: aiohttp.ClientSession, url: str, timeout: float = 300.0) -> None:
    """Wait until the router sees no KV in flight on any WAN link."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        async with http.get(url + "/metrics") as r:
            text = await r.text()
        inflight = [
            float(ln.rsplit(" ", 1)[1])
            for ln in text.splitlines()
            if ln.startswith("pdd_link_in_flight_bytes{")
        ]
        if inflight and not any(inflight):
            return
        await asyncio.sleep(0.5)


def draw_hit(rng: random.Random) -> float:
    x = rng.random()
    for share, lo, hi in HIT_MIX:
        if x < share:
            return rng.uniform(lo, hi)
        x -= share
    return rng.uniform(HIT_MIX[-1][1], HIT_MIX[-1][2])


def bench_rld_share(requests: int, rate: float) -> None:
    print("== RLD share of output tokens, 64K in / 1K out, default PDD config (E6) ==")
    print(
        "   emulated topology of the pdd scenario (netem): WAN 10 Gbit/s, 15 ms +-3 ms one "
        "way, emulation_scale 1000; 4 P, 2 RLD, 4 MD; default routing and handoff"
    )
    spec = emulated_pdd()
    base = [i for i in spec["instances"]]
    p = next(i for i in base if i["role"] == "prefill")
    rld = next(i for i in base if i["role"] == "relay-decode")
    md = next(i for i in base if i["role"] == "main-decode")
    router = next(i for i in base if i["role"] == "router")
    spec["instances"] = (
        [router]
        + [{**p, "id": f"p{k}"} for k in range(4)]
        + [{**rld, "id": f"rld{k}"} for k in range(2)]
        + [{**md, "id": f"md{k}"} for k in range(4)]
    )
    ctx_len = 65536
    rng = random.Random(11)
    contexts = [[rng.randrange(1, 150000) for _ in range(ctx_len)] for _ in range(8)]

    async def run(url: str) -> tuple[list[Outcome], float]:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as http:
            warm = [
                stream_request(http, url, body_bytes(tokens_json(c), 1), f"warm{k}", 1)
                for k, c in enumerate(contexts)
            ]
            await asyncio.gather(*warm)
            await wan_idle(http, url)  # the contexts' KV has landed on the MDs
            tasks = []
            t0 = time.monotonic()
            for k in range(requests):
                hit = draw_hit(rng)
                ctx = contexts[rng.randrange(len(contexts))]
                keep = int(hit * ctx_len)
                prompt = ctx[:keep] + [rng.randrange(1, 150000) for _ in range(ctx_len - keep)]
                due = t0 + k / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                tasks.append(
                    asyncio.create_task(
                        stream_request(
                            http, url, body_bytes(tokens_json(prompt), 1024), f"r{k}", 1024
                        )
                    )
                )
            outs = await asyncio.gather(*tasks)
            return outs, time.monotonic() - t0

    outs, wall = run_emulated(spec, run)
    ok = [o for o in outs if o.ok and o.pdd]
    relay = sum(o.pdd["relay_tokens"] for o in ok)  # type: ignore[index]
    total = sum(o.tokens for o in ok)
    pipes = Counter(o.pdd["pipeline"] for o in ok)  # type: ignore[index]
    modes = Counter(o.pdd["handoff_mode"] for o in ok if o.pdd["handoff_mode"])  # type: ignore[index]
    ttft = [o.ttft for o in ok if o.ttft is not None]
    print(f"requests {len(outs)} ok {len(ok)} in {wall:.0f} s at {rate} req/s")
    print(
        f"RLD share of output tokens: {relay / max(total, 1) * 100:.1f}%  (published 6.2%; "
        f"MD:RLD = {(total - relay) / max(relay, 1):.1f}:1)"
    )
    print(f"pipelines {dict(pipes)}; handoff modes {dict(modes)}")
    print(f"TTFT p50 {pct(ttft, 50):.2f} s, p90 {pct(ttft, 90):.2f} s, p99 {pct(ttft, 99):.2f} s")
    wan = sum(o.pdd["wan_bytes"] for o in ok)  # type: ignore[index]
    print(
        f"offered WAN load: {wan / (requests / rate) / (10e9 / 8) * 100:.0f}% of the 10 Gbps "
        f"line while requests arrive (the RLD share grows with WAN queueing)"
    )
    if len(ok) < len(outs):
        print("errors:", Counter(o.error for o in outs if not o.ok).most_common(3))


# -- performance ------------------------------------------------------------------------------
def perf_deployment(base_port: int, n_p: int, n_rld: int, n_md: int) -> dict[str, Any]:
    insts: list[dict[str, Any]] = [
        {"id": "router", "role": "router", "address": f"127.0.0.1:{base_port}"}
    ]
    port = base_port + 1
    for role, n, hw, dc, short in (
        ("prefill", n_p, "h800-sxm", "dc-a", "p"),
        ("relay-decode", n_rld, "h800-sxm", "dc-a", "rld"),
        ("main-decode", n_md, "h20", "dc-b", "md"),
    ):
        for k in range(n):
            insts.append(
                {
                    "id": f"{short}{k}",
                    "role": role,
                    "address": f"127.0.0.1:{port}",
                    "hardware": hw,
                    "chips": 16,
                    "datacenter": dc,
                }
            )
            port += 1
    return {
        "name": "perf-43A-32B",
        "architecture": "pdd",
        "byte_scale": 1e-5,
        "block_size": 256,
        # A fixed 200 Gbps WAN belief and a 0.5 s TTFT target: cold turns (57K uncached,
        # 0.6 s of prefill) are relayed, warm ones go direct, unless the link queue is long.
        "routing": {
            "bandwidth_source": "configured",
            "wan_bandwidth_gbps": 200.0,
            "ttft_target_s": 0.5,
        },
        "health_interval_s": 2.0,
        "instances": insts,
    }


@dataclass
class Session:
    prompt_json: str  # JSON array text of the next prompt, without the closing bracket
    turns_left: int
    busy: bool = False
    outcomes: list[Outcome] = field(default_factory=list)


def _runq_wait_s(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a CPU (schedstat)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[1]) / 1e9
    return total


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_host(
    tmp: Path, name: str, dep: dict[str, Any], serve: list[str], realtime: int | None = None
) -> subprocess.Popen[str]:
    cfg = tmp / f"{name}.json"
    cfg.write_text(json.dumps({"deployment": dep, "serve": serve}))
    rt = [] if realtime is None else ["--realtime", str(realtime)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg), *rt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"host {name} failed: {proc.stderr.read() if proc.stderr else ''}")
        if line.strip() == "ready":
            return proc


async def _scrape(http: aiohttp.ClientSession, addresses: list[str]) -> dict[str, list[str]]:
    async def one(a: str) -> tuple[str, list[str]]:
        async with http.get(f"http://{a}/metrics") as r:
            return a, (await r.text()).splitlines()

    return dict(await asyncio.gather(*(one(a) for a in addresses)))


def _hist(lines: list[str], name: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for ln in lines:
        if ln.startswith(name + "_bucket{"):
            le = ln.split(',le="')[1].split('"')[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(ln.rsplit(" ", 1)[1])
    return out


def _sum_hists(hs: list[dict[float, float]]) -> dict[float, float]:
    tot: dict[float, float] = {}
    for h in hs:
        for k, v in h.items():
            tot[k] = tot.get(k, 0.0) + v
    return tot


def _p_from_buckets(h: dict[float, float], q: float) -> str:
    total = h.get(float("inf"), 0.0)
    if not total:
        return "n/a"
    for le in sorted(h):
        if h[le] >= q * total:
            return "> 1 s" if le == float("inf") else f"<= {le * 1e3:g} ms"
    return "n/a"


def _phases(ok: list[Outcome]) -> str:
    keys = [
        ("arrival", "routed"),
        ("routed", "prefill_queued_until"),
        ("prefill_queued_until", "prefill_start"),
        ("prefill_start", "prefill_end"),
        ("prefill_end", "first_token"),
    ]
    parts = []
    for a, b in keys:
        xs = [
            o.pdd["times"][b] - o.pdd["times"][a]
            for o in ok
            if o.pdd and o.pdd["times"].get(a) and o.pdd["times"].get(b)
        ]
        if xs:
            parts.append(f"{a}->{b} p50 {pct(xs, 50) * 1e3:.0f} / p99 {pct(xs, 99) * 1e3:.0f} ms")
    return "; ".join(parts)


def bench_perf(
    rate: float,
    seconds: float,
    n_p: int,
    n_rld: int,
    n_md: int,
    ramp: float,
    procs_a: int = 1,
    procs_b: int = 1,
    rt: int | None = None,
) -> None:
    print(
        f"== perf: {n_p} P + {n_rld} RLD (h800 x16) + {n_md} MD (h20 x16), {rate:g} req/s "
        f"agentic, {ramp:g} s ramp then {seconds:g} s measured (loopback, real processes: "
        f"1 router, {procs_a} hosting A, {procs_b} hosting B; worker hosts "
        f"{'SCHED_FIFO ' + str(rt) if rt else 'normal priority'}) =="
    )
    import numpy as np

    base = free_port_block(2 + n_p + n_rld + n_md)
    dep = perf_deployment(base, n_p, n_rld, n_md)
    ids = [i["id"] for i in dep["instances"]]
    tmp = Path(tempfile.mkdtemp(prefix="pddbench-perf-"))
    a_ids = [i for i in ids if i.startswith(("p", "rld"))]
    b_ids = [i for i in ids if i.startswith("md")]
    procs = [_start_host(tmp, "router", dep, ["router"])]
    procs += [_start_host(tmp, f"a{k}", dep, a_ids[k::procs_a], rt) for k in range(procs_a)]
    procs += [_start_host(tmp, f"b{k}", dep, b_ids[k::procs_b], rt) for k in range(procs_b)]
    rng = random.Random(5)
    nrng = np.random.default_rng(5)
    system = ",".join(map(str, nrng.integers(1, 150000, 8192).tolist()))
    url = f"http://{dep['instances'][0]['address']}"

    def fresh(n: int) -> str:
        return ",".join(map(str, nrng.integers(1, 150000, n).tolist()))

    def new_session(turns: int = 10) -> Session:
        # turn 0: shared 8K system prompt + 49K of task context (hit ~14%); each later turn
        # adds the previous output (~300) and a tool result (400): hit ~99%; mean ~90%.
        return Session("[" + system + "," + fresh(49_000), turns_left=turns)

    # Closed loop: S sessions, each running turn after turn with no think time; S is sized
    # so that S / (turn latency) = rate when a turn takes ``turn_s``. If the cluster slows
    # down, the achieved rate drops (and is reported) instead of a queue growing forever.
    turn_s = 0.25 + 300 * 0.021
    n_sessions = max(1, round(rate * turn_s))

    async def run() -> tuple[list[Outcome], float, dict[str, list[str]], dict[str, list[str]]]:
        outs: list[Outcome] = []
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as http:
            for _ in range(100):
                async with http.get(url + "/health") as r:
                    if (await r.json())["status"] == "ok":
                        break
                await asyncio.sleep(0.1)
            t0 = time.monotonic()
            t_measure, t_end = t0 + ramp, t0 + ramp + seconds
            counter = iter(range(10**9))

            async def session(i: int) -> None:
                await asyncio.sleep(ramp * i / n_sessions)
                s = new_session(rng.randint(1, 10))  # desynchronised: new sessions keep coming
                while time.monotonic() < t_end:
                    if s.turns_left == 0:
                        s = new_session()
                    out_n = rng.randint(200, 400)
                    body = body_bytes(s.prompt_json + "]", out_n)
                    sent = time.monotonic()
                    o = await stream_request(http, url, body, f"q{next(counter)}", out_n)
                    if t_measure <= sent < t_end:
                        outs.append(o)
                    s.prompt_json += "," + fresh(out_n + 400)
                    s.turns_left -= 1

            tasks = [asyncio.create_task(session(i)) for i in range(n_sessions)]
            await asyncio.sleep(max(0.0, t_measure - time.monotonic()))
            before = await _scrape(http, [i["address"] for i in dep["instances"]])
            await asyncio.gather(*tasks)
            after = await _scrape(http, [i["address"] for i in dep["instances"]])
        return outs, seconds, before, after

    import resource

    cpu0 = [_cpu_s(p.pid) for p in procs]
    wait0 = [_runq_wait_s(p.pid) for p in procs]
    me0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        outs, sent_wall, before, after = run_loop(run())
        per = [_cpu_s(p.pid) - c for p, c in zip(procs, cpu0, strict=True)]
        waits = [_runq_wait_s(p.pid) - w for p, w in zip(procs, wait0, strict=True)]
        cpu = [per[0], sum(per[1 : 1 + procs_a]), sum(per[1 + procs_a :])]
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(me1.ru_utime + me1.ru_stime - me0.ru_utime - me0.ru_stime)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
    ok = [o for o in outs if o.ok]
    span = max(o.send + o.e2e for o in outs) - min(o.send for o in outs)
    print(
        f"measured window ({n_sessions} closed-loop sessions): sent {len(outs)} requests in "
        f"{sent_wall:.1f} s ({len(outs) / sent_wall:.1f} req/s); completed OK {len(ok)} "
        f"({len(ok) / max(len(outs), 1) * 100:.1f}%); last done {span:.1f} s after the first sent"
    )
    if len(ok) < len(outs):
        print("errors:", Counter(o.error for o in outs if not o.ok).most_common(3))
    hits = [o.pdd["cached_tokens"] / o.pdd["prompt_tokens"] for o in ok if o.pdd]
    pipes = Counter(o.pdd["pipeline"] for o in ok if o.pdd)
    ttft = [o.ttft for o in ok if o.ttft is not None]
    toks = sum(o.tokens for o in ok)
    ctx = statistics.mean(o.pdd["prompt_tokens"] for o in ok if o.pdd)
    print(
        f"mean context {ctx / 1e3:.1f}K tokens, "
        f"mean prefix hit {statistics.mean(hits) * 100:.1f}%; "
        f"pipelines {dict(pipes)}; {toks / span:.0f} output tokens/s"
    )
    print(
        f"TTFT p50 {pct(ttft, 50) * 1e3:.0f} ms, p99 {pct(ttft, 99) * 1e3:.0f} ms; "
        f"e2e p50 {pct([o.e2e for o in ok], 50):.1f} s"
    )
    print("server-side phases:", _phases(ok))
    print(
        "CPU seconds over the whole run: "
        + ", ".join(
            f"{n} {c:.1f}" for n, c in zip(("router", "A", "B", "client"), cpu, strict=True)
        )
    )
    print(
        "waiting for a CPU while runnable (run queue, s): router "
        f"{waits[0]:.1f}, A {sum(waits[1 : 1 + procs_a]):.1f}, B {sum(waits[1 + procs_a :]):.1f}"
    )
    diff = {a: [ln for ln in after[a]] for a in after}

    def hist(addr: str, name: str) -> dict[float, float]:
        h1, h0 = _hist(diff[addr], name), _hist(before.get(addr, []), name)
        return {k: v - h0.get(k, 0.0) for k, v in h1.items()}

    addrs = [i["address"] for i in dep["instances"]]
    sched = _sum_hists([hist(a, "pdd_scheduler_lag_seconds") for a in addrs])
    n = sched.get(float("inf"), 0)
    within5 = sched.get(0.005, 0) / n * 100 if n else float("nan")
    print(
        f"scheduler lag (measured window) over {n:.0f} steps: p50 {_p_from_buckets(sched, 0.5)}, "
        f"p99 {_p_from_buckets(sched, 0.99)}, {within5:.2f}% within 5 ms"
    )
    for name, prefixes in (("A", ("p", "rld")), ("B", ("md",))):
        ads = [i["address"] for i in dep["instances"] if i["id"].startswith(prefixes)]
        h = _sum_hists([hist(a, "pdd_scheduler_lag_seconds") for a in ads])
        n_h = h.get(float("inf"), 0)
        print(
            f"  scheduler lag, {name} instances: p99 {_p_from_buckets(h, 0.99)}, "
            f"{h.get(0.005, 0) / n_h * 100 if n_h else float('nan'):.2f}% within 5 ms, "
            f"{h.get(0.002, 0) / n_h * 100 if n_h else float('nan'):.2f}% within 2 ms"
        )
    for name, first in (("router", "router"), ("A", a_ids[0]), ("B", b_ids[0])):
        a = next(x["address"] for x in dep["instances"] if x["id"] == first)
        h = hist(a, "pdd_event_loop_lag_seconds")
        print(
            f"event-loop lag, process {name}: p50 {_p_from_buckets(h, 0.5)}, "
            f"p99 {_p_from_buckets(h, 0.99)}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("section", choices=["compute", "handoff", "rld-share", "perf", "all"])
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--n", type=int, default=10, help="handoffs per mode (handoff section)")
    ap.add_argument("--cluster", default="35,8,32", help="P,RLD,MD counts (perf section)")
    ap.add_argument("--ramp", type=float, default=20.0, help="perf: seconds of rising load first")
    ap.add_argument(
        "--jitter-ms", type=float, default=None, help="handoff: WAN jitter (default: scenario's)"
    )
    ap.add_argument("--procs", default="1,1", help="perf: host processes for the A and B instances")
    ap.add_argument(
        "--realtime",
        type=int,
        default=10,
        help="perf: SCHED_FIFO priority of the worker hosts (0: normal priority)",
    )
    a = ap.parse_args()
    if a.section in ("compute", "all"):
        bench_compute()
    if a.section in ("handoff", "all"):
        from bench_handoff import DEFAULT_BG_TOKENS, DEFAULT_LOAD, bench_handoff

        bench_handoff(a.n, a.jitter_ms, DEFAULT_LOAD, DEFAULT_BG_TOKENS)
    if a.section in ("rld-share", "all"):
        bench_rld_share(a.requests, a.rate or 1.5)
    if a.section in ("perf", "all"):
        n_p, n_rld, n_md = (int(x) for x in a.cluster.split(","))
        procs_a, procs_b = (int(x) for x in a.procs.split(","))
        bench_perf(
            a.rate or 50.0,
            a.seconds,
            n_p,
            n_rld,
            n_md,
            a.ramp,
            procs_a,
            procs_b,
            a.realtime or None,
        )


if __name__ == "__main__":
    main()
