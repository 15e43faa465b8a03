"""Priming the caches with a history: one placement rule (the router's), two drivers (the
twin in process — tests/harness/test_steady.py — and the servers' /internal/prime here)."""

from __future__ import annotations

import asyncio

import aiohttp

from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.harness.drive.prime import PrimeResult, prime_deployment
from pddbench.harness.drive.replay import ReplayPlan, prompt_function
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.servers.config import DeploymentConfig
from pddbench.servers.priming import place
from pddbench.servers.radix import KvPool
from pddbench.servers.router_core import RouterCore

from ..traces import chain_table
from .helpers import VOCAB, complete, deployment, running


def _core(spec: dict) -> RouterCore:
    core = RouterCore(DeploymentConfig.model_validate(spec))
    for i in core.workers:
        core.set_healthy(i.id, True)
    return core


def test_kv_pool_prime_adds_unpinned_blocks_and_evicts_lru() -> None:
    pool = KvPool(capacity_tokens=10 * 4, block_size=4)
    assert pool.prime([1, 2, 3]) == 3
    assert pool.prime([1, 2, 3, 4]) == 1  # what is there is not added twice
    assert pool.tree.match([1, 2, 3, 4]).blocks == 4 and pool.private_tokens == 0
    assert pool.prime([9, 8, 7, 6, 5, 4, 3]) == 7  # full: the LRU leaf of the first goes
    assert pool.tree.blocks == 10 and pool.tree.match([1, 2, 3, 4], touch=False).blocks == 3
    node, _ = pool.tree.insert([20, 21])
    pool.tree.pin(node)
    assert pool.prime(list(range(100, 111))) == 0  # does not fit beside pinned data


def test_place_spreads_sessions_and_keeps_a_prefix_on_its_instance() -> None:
    core = _core(deployment("pd", {"prefill": 2, "decode": 2}))
    sessions = [[(s << 20) | b for b in range(8)] for s in range(4)]
    longer = [*sessions[0], 999]  # session 0 again, one block on
    out = place(core, [*sessions, longer])
    by_role = {"p": [], "d": []}
    for p in reversed(out):  # earliest needed first
        by_role[p.instance_id[0]].append(p)
    for placements in by_role.values():
        assert {p.instance_id for p in placements[:4]} == {
            placements[0].instance_id[0] + "0",
            placements[0].instance_id[0] + "1",
        }
        assert placements[4].instance_id == placements[0].instance_id  # its prefix's instance
    assert out[0].hashes == longer  # latest needed first: inserted first, evicted first


def test_place_stops_at_a_roles_capacity() -> None:
    core = _core(deployment("colocated", {"colocated": 1}))
    core.capacity["c0"] = 100 * core.dep.block_size  # zero-compute hardware holds ~10^13
    big = 51
    out = place(core, [[(s << 32) | b for b in range(big)] for s in range(3)])
    assert len(out) == 1  # the second no longer fits beside the first


def test_servers_prime_endpoint_makes_continuing_turns_hit() -> None:
    """A steady point's primes through /internal/prime: a session in progress at the window
    start finds its history cached on P and D; on a cold deployment it finds nothing."""
    spec = deployment("pd", {"prefill": 2, "decode": 2})
    table = chain_table(sessions=6, turns=5, session_gap_s=4.0, turn_gap_s=8.0, block=64)
    point = SteadyIndex(table, Selection()).point(24.0, 2, 12.0)
    plan = ReplayPlan(point.requests, table, point.theoretical_cached, "t", point.priming)
    opts = ReplayOptions(vocab_size=VOCAB)
    prompt = prompt_function(plan, opts)
    continuing = [r for r in point.requests if r.parent_request_id is None and r.turn_index > 0]
    assert continuing and point.priming.entries

    async def run(primed: bool) -> tuple[str, list[tuple[int, int, int]]]:
        note = ""
        async with running(spec) as (_host, url, _), aiohttp.ClientSession() as http:
            if primed:
                note = (await asyncio.to_thread(prime_deployment, url, plan, opts)).describe()
            got = []
            for r in continuing:
                c = await complete(http, url, prompt(r), 2, r.request_id)
                assert c.usage is not None and c.pdd is not None, c.error
                p_cached = c.usage["prompt_tokens_details"]["cached_tokens"]
                got.append((p_cached, c.pdd["decode_side"]["D"]["cached"], r.input_length))
            return note, got

    note, primed = asyncio.run(run(True))
    assert "caches primed" in note, note
    for (p_cached, d_cached, n), r in zip(primed, continuing, strict=True):
        assert p_cached == point.theoretical_cached[r.request_id] == r.turn_index * 64 < n
        assert d_cached == p_cached
    _, cold = asyncio.run(run(False))
    assert all(p == 0 and d == 0 for p, d, _ in cold)


def test_the_twin_and_the_servers_place_the_same_blocks_on_the_same_instances() -> None:
    """One priming decision, two drivers: per instance, the twin adds as many blocks as the
    reference servers' /internal/prime does (prefixes hashed by each driver its own way)."""
    from pddbench.twin.prompts import prime_hashes
    from pddbench.twin.run import Twin

    spec = deployment("pd", {"prefill": 2, "decode": 3})
    table = chain_table(sessions=9, turns=5, session_gap_s=3.0, turn_gap_s=8.0, block=64)
    point = SteadyIndex(table, Selection()).point(24.0, 3, 12.0)
    plan = ReplayPlan(point.requests, table, point.theoretical_cached, "t", point.priming)
    opts = ReplayOptions(vocab_size=VOCAB)

    async def served() -> PrimeResult:
        async with running(spec) as (_host, url, _):
            return await asyncio.to_thread(prime_deployment, url, plan, opts)

    result = asyncio.run(served())
    dep = DeploymentConfig.model_validate(spec)
    twin = Twin(dep, None)
    prefix = prime_hashes(table, dep.block_size)
    added: dict[str, int] = {}
    for p in place(twin.core, [prefix(e) for e in point.priming.entries]):
        added[p.instance_id] = added.get(p.instance_id, 0) + twin.workers[p.instance_id].pool.prime(
            p.hashes
        )
    assert len(added) == 5  # every P and D holds some history
    assert result.blocks == added and not result.problem
