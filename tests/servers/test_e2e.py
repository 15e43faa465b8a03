"""End to end on loopback: every architecture and handoff mode, hundreds of concurrent requests.

Each request's token ids are checked against the deterministic token function, so a
duplicated, missing or reordered token anywhere (notably at an RLD -> MD seam) fails the
test. MD sits behind a slow stand-in WAN link (tests/servers/slowlink.py) so its KV lands
after RLD has produced tokens, which is what makes one-shot and catch-up handoffs real.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import aiohttp
import pytest

from pddbench.servers import profiles

from .helpers import Completion, agentic_prompts, complete, deployment, expected, running

pytestmark = pytest.mark.timeout(120)


async def drive(
    url: str,
    prompts: list[list[int]],
    turns: int,
    rng: random.Random,
    *,
    lo: int,
    hi: int,
    tag: str,
) -> list[tuple[str, int, Completion]]:
    """Sessions run concurrently; a session's turns run one after another."""
    out: list[tuple[str, int, Completion]] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as http:

        async def session(k: int) -> None:
            for j in range(turns):
                rid = f"{tag}-s{k}-t{j}"
                n = rng.randint(lo, hi)
                stream = (k + j) % 5 != 0
                c = await complete(http, url, prompts[k * turns + j], n, rid, stream=stream)
                out.append((rid, n, c))

        await asyncio.gather(*(session(k) for k in range(len(prompts) // turns)))
    return out


def check_exactly_once(results: list[tuple[str, int, Completion]]) -> None:
    bad = []
    for rid, n, c in results:
        if c.status != 200 or c.error or not c.done or c.ids != expected(rid, n):
            bad.append((rid, c.status, c.error, len(c.ids), n))
            continue
        assert c.finish_reason == "length"
        assert c.pdd is not None and c.pdd["output_tokens"] == n and c.pdd["request_id"] == rid
        assert c.usage is not None and c.usage["completion_tokens"] == n
    assert not bad, f"{len(bad)} requests wrong, e.g. {bad[:3]}"


@pytest.mark.parametrize(
    ("arch", "roles", "extra"),
    [
        ("colocated", {"colocated": 2}, {}),
        ("pd", {"prefill": 2, "decode": 2}, {}),
        ("pd-no-drc", {"prefill": 2, "decode": 2}, {}),
    ],
)
def test_baselines_every_token_exactly_once(
    arch: str, roles: dict[str, int], extra: dict[str, Any]
) -> None:
    rng = random.Random(1)
    spec = deployment(arch.split("-")[0], roles, dc_of={"decode": "dc-b"}, **extra)
    if arch == "pd-no-drc":
        for inst in spec["instances"]:
            if inst["role"] == "decode":
                inst["prefix_cache"] = False
    prompts = agentic_prompts(rng, sessions=40, turns=3)

    async def main() -> tuple[list[tuple[str, int, Completion]], str]:
        async with running(spec) as (host, url, _):
            out = await drive(url, prompts, 3, rng, lo=5, hi=40, tag=arch)
            return out, "".join(w.m.render() for w in host.workers)

    results, text = asyncio.run(main())
    assert len(results) == 120
    check_exactly_once(results)
    later = [c for rid, _, c in results if not rid.endswith("-t0")]
    # later turns extend earlier ones: the prefill side finds most of the prompt cached
    assert sum(c.usage["prompt_tokens_details"]["cached_tokens"] > 0 for c in later) > 60
    pipelines = {c.pdd["pipeline"] for _, _, c in results}
    assert pipelines == ({"colocated"} if arch == "colocated" else {"P->D"})
    if arch == "pd":
        hits = [c.pdd["decode_side"]["D"]["cached"] for c in later]
        assert sum(h > 0 for h in hits) > 40  # decode-side cache: D reports its prefix
        assert all(c.pdd["wan_bytes"] > 0 for _, _, c in results)  # dc-a -> dc-b
    if arch == "pd-no-drc":
        assert all(c.pdd["decode_side"]["D"]["cached"] == 0 for _, _, c in results)
    whole = [c for rid, _, c in results if c.headers.get("X-PDD")]
    assert whole and all(
        json.loads(c.headers["X-PDD"])["request_id"] == c.pdd["request_id"] for c in whole
    )  # non-streaming: the story also rides in a header
    assert "pdd_prefix_cache_hits_tokens_total" in text and "pdd_busy_seconds_total" in text
    hits = sum(
        float(ln.rsplit(" ", 1)[1])
        for ln in text.splitlines()
        if ln.startswith("pdd_prefix_cache_hits_tokens_total")
    )
    assert hits > 0
    if arch != "colocated":
        assert 'pdd_kv_bytes_sent_total{instance="p' in text
        assert 'pdd_kv_bytes_received_total{instance="d' in text and 'peer="p' in text


HANDOFFS = {
    "one-shot": {"schedule": "one-shot"},
    "catch-up": {"schedule": "catch-up", "catch_up_threshold": 6},
    "adaptive": {"schedule": "adaptive", "catch_up_threshold": 6, "adaptive_load_threshold": 0.2},
    "kv": {"transfer": "kv"},
}


def relay_deployment(mode: str) -> dict[str, Any]:
    spec = deployment(
        "pdd",
        {"prefill": 2, "relay-decode": 2, "main-decode": 2},
        step_overhead_s=0.05,  # decoders: 50 ms per token
        sched_of={"prefill": {"step_overhead_s": 0.002, "prefill_packing": True}},
        routing={"pipeline_policy": "always-relay"},
        handoff=HANDOFFS[mode],
    )
    spec["scheduler"]["max_batch"] = 64
    return spec


@pytest.mark.parametrize("mode", list(HANDOFFS))
def test_pdd_handoff_mode_every_token_exactly_once(mode: str) -> None:
    rng = random.Random(2)
    sessions = 40
    # ~50 KB of KV per cold request; 20 of them share each MD's 3 MB/s stand-in WAN, so
    # MD's KV lands up to ~0.4 s after RLD's and RLD has produced up to ~8 tokens by then.
    slow = {
        "md0": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
        "md1": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
    }
    prompts = agentic_prompts(rng, sessions=sessions, turns=2, system=256, step=900)

    async def main() -> list[tuple[str, int, Completion]]:
        async with running(relay_deployment(mode), slow) as (_, url, _):
            return await drive(url, prompts, 2, rng, lo=40, hi=70, tag=mode)

    check_relay(mode, asyncio.run(main()), 2 * sessions)


def test_pdd_hundreds_of_concurrent_requests() -> None:
    """300 requests at once through relay and handoff (adaptive): each token exactly once."""
    rng = random.Random(4)
    spec = relay_deployment("adaptive")
    spec["instances"] = [i for i in spec["instances"] if i["role"] != "relay-decode"] + [
        {**i, "id": f"rld{k}"}
        for k, i in enumerate(
            [next(x for x in spec["instances"] if x["role"] == "relay-decode")] * 3
        )
    ]
    for inst in spec["instances"]:
        if inst["role"] != "prefill":
            inst["scheduler"] = {"step_overhead_s": 0.03, "chunk_tokens": 2048, "max_batch": 128}
    slow = {"md0": {"rate_bytes_per_s": 2e7}, "md1": {"rate_bytes_per_s": 2e7}}
    prompts = agentic_prompts(rng, sessions=300, turns=1, system=512, step=400)

    async def main() -> list[tuple[str, int, Completion]]:
        async with running(spec, slow) as (host, url, _):
            out = await drive(url, prompts, 1, rng, lo=8, hi=24, tag="burst")
            for _ in range(100):  # everything released once the last transfers end
                left = {w.id: list(w.jobs) for w in host.workers if w.jobs or w.engine.seqs}
                if not left:
                    break
                await asyncio.sleep(0.05)
            assert not left, left
            return out

    results = asyncio.run(main())
    assert len(results) == 300
    check_exactly_once(results)
    stories = [c.pdd for _, _, c in results]
    assert sum(s["relay_tokens"] for s in stories) > 0
    assert sum(s["tokens_by_origin"].get("MD", 0) for s in stories) > 0


def check_relay(mode: str, results: list[tuple[str, int, Completion]], n: int) -> None:
    assert len(results) == n
    check_exactly_once(results)
    stories = [c.pdd for _, _, c in results]
    assert all(s["pipeline"] == "P->RLD->MD" for s in stories)
    handed = [s for s in stories if s["handoff"] and s["handoff"]["seam"] is not None]
    assert len(handed) > n // 3, (mode, Counter(s["handoff_mode"] for s in stories))
    assert sum(s["relay_tokens"] for s in stories) > 0
    assert all(s["first_token_origin"] in ("RLD", "MD") for s in stories)
    for s in handed:  # the seam is where RLD stopped and MD began
        assert s["tokens_by_origin"].get("RLD", 0) == s["handoff"]["seam"]
        assert s["finish_origin"] == "MD"
    modes = Counter(s["handoff_mode"] for s in handed)
    batches = Counter(s["handoff"]["batches"] for s in handed)
    if mode == "one-shot":
        assert set(modes) == {"one-shot"} and set(batches) == {1}
    elif mode == "catch-up":
        assert set(modes) == {"catch-up"}
        assert max(batches) >= 2, batches  # batches went while RLD kept decoding
    elif mode == "adaptive":
        # busy RLD (>= 13 of 64 batch slots) -> one-shot, else catch-up
        assert set(modes) == {"one-shot", "catch-up"}, (modes, batches)
    else:
        assert set(modes) == {"kv"}
        big = [s for s in handed if s["handoff"]["tokens"] > 2]
        assert big, batches
        for s in big:  # RLD's KV of the handed-over tokens crossed the WAN, not only ids
            assert s["handoff"]["modelled_payload_bytes"] >= (s["handoff"]["tokens"] - 1) * 46490


def test_pdd_hit_rate_aware_routing_relays_only_low_hit_turns() -> None:
    rng = random.Random(3)
    spec = deployment(
        "pdd",
        {"prefill": 2, "relay-decode": 1, "main-decode": 2},
        step_overhead_s=0.002,
        # 1 Gbps, fixed (not measured): a cold turn's 3000 uncached tokens (139 MB modelled)
        # predict 1.1 s of WAN > 1 s target; a warm turn's 200 (9.3 MB) 74 ms, so even 12 of
        # them queued on the link stay under the target.
        routing={"ttft_target_s": 1.0, "wan_bandwidth_gbps": 1.0, "bandwidth_source": "configured"},
    )
    prompts = agentic_prompts(rng, sessions=12, turns=3, system=64, first=3000, step=200)
    slow = {"md0": {"rate_bytes_per_s": 2e7}, "md1": {"rate_bytes_per_s": 2e7}}

    async def main() -> list[tuple[str, int, Completion]]:
        async with running(spec, slow) as (_, url, _):
            return await drive(url, prompts, 3, rng, lo=40, hi=80, tag="har")

    results = asyncio.run(main())
    check_exactly_once(results)
    by_turn: dict[str, Counter[str]] = {}
    for rid, _, c in results:
        by_turn.setdefault(rid.rsplit("-", 1)[1], Counter())[c.pdd["pipeline"]] += 1
    assert by_turn["t0"] == Counter({"P->RLD->MD": 12}), by_turn
    assert by_turn["t1"] == by_turn["t2"] == Counter({"P->MD": 12}), by_turn


def test_pdd_rld_only_ablation_never_involves_md() -> None:
    rng = random.Random(5)
    spec = relay_deployment("one-shot")
    spec["routing"] = {
        "pipeline_policy": "always-relay",
        "allow_rld_only": True,
        "rld_only_max_hit": 1.0,
    }
    prompts = agentic_prompts(rng, sessions=20, turns=2, system=128, step=500)

    async def main() -> tuple[list[tuple[str, int, Completion]], dict[str, int]]:
        async with running(spec) as (host, url, _):
            out = await drive(url, prompts, 2, rng, lo=5, hi=20, tag="rldonly")
            md = {
                w.id: sum(w.m.kv_received.values.values())
                for w in host.workers
                if w.role.value == "main-decode"
            }
            return out, md

    results, md_received = asyncio.run(main())
    check_exactly_once(results)
    assert {c.pdd["pipeline"] for _, _, c in results} == {"P->RLD"}
    assert all(c.pdd["tokens_by_origin"] == {"RLD": n} for _, n, c in results)
    assert all(c.pdd["wan_bytes"] == 0 for _, _, c in results)
    # MD only saw reservations that were then dropped; it never received any KV
    assert md_received == {"md0": 0, "md1": 0}


def test_pdd_full_relay_does_not_stall_prefill() -> None:
    """RLD has KV room for one relayed request at a time. While a first one holds it (its KV
    to MD crawls over a slow link), a second low-hit request goes straight P -> MD and P
    starts its prefill at once. (Before, the router relayed it anyway: the request waited in
    RLD's admission queue and P did not start until the first one was handed off.)"""
    hw, model = profiles.hardware("h800-sxm"), profiles.model("pdd-flagship-1t")
    room = 4000  # RLD's KV capacity in tokens: one 3000 + 200 request fits, two do not
    reserve = 1 - (model.weight_bytes + room * model.kv_bytes_per_token) / (16 * hw.hbm_bytes)
    spec = deployment(
        "pdd",
        {"prefill": 1, "relay-decode": 1, "main-decode": 1},
        routing={"pipeline_policy": "always-relay"},
    )
    for inst in spec["instances"]:
        if inst["role"] == "relay-decode":
            inst.update(hardware="h800-sxm", chips=16)
            inst["scheduler"] = {"hbm_reserve_fraction": reserve + 1e-6}
    rng = random.Random(5)
    a, b = ([rng.randrange(100, 150000) for _ in range(3000)] for _ in range(2))
    slow = {"md0": {"rate_bytes_per_s": 1e5}}  # 139 KB of scaled KV: ~1.4 s

    async def main() -> tuple[Completion, Completion]:
        async with running(spec, slow) as (_, url, _), aiohttp.ClientSession() as http:
            first = asyncio.create_task(complete(http, url, a, 200, "full-a"))
            await asyncio.sleep(0.3)
            second = await complete(http, url, b, 20, "full-b")
            return await first, second

    first, second = asyncio.run(main())
    assert first.pdd is not None and first.pdd["pipeline"] == "P->RLD->MD"
    assert second.pdd is not None and second.ids == expected("full-b", 20)
    assert second.pdd["pipeline"] == "P->MD", second.pdd["routing"]
    assert "relay full" in second.pdd["routing"]["reason"]
    t = second.pdd["times"]
    assert t["prefill_start"] - t["arrival"] < 0.5  # no wait for RLD's memory
