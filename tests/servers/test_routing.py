"""Router decisions: cache-aware instance choice, link estimates, pipeline choice, merging."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from pddbench.servers.routing import (
    AffinityIndex,
    LinkEstimator,
    Pipeline,
    PipelineInputs,
    PipelinePolicy,
    RoutingPolicy,
    SeamError,
    SelectionPolicy,
    TokenSequencer,
    choose_instance,
    decide_pipeline,
)

KVB = 46490.0
GBPS10 = 10e9 / 8


def inputs(
    prompt: int, md_cached: int, *, prefill_s: float = 0.3, bw: float = GBPS10, relay: bool = True
) -> PipelineInputs:
    return PipelineInputs(prompt, md_cached, KVB, prefill_s, LinkEstimator(bw), relay)


def test_high_hit_goes_direct_low_hit_is_relayed() -> None:
    pol = RoutingPolicy(ttft_target_s=2.0)
    high = decide_pipeline(inputs(65536, 62000), pol)  # 3.5K uncached: 0.13 s of WAN
    low = decide_pipeline(inputs(65536, 4096), pol)  # 61K uncached: 2.3 s of WAN
    assert high.pipeline is Pipeline.DIRECT and high.predicted_wan_s < 0.2
    assert low.pipeline is Pipeline.RELAY and low.predicted_ttft_s > 2.0
    assert "target" in low.reason


def test_queue_on_the_link_counts() -> None:
    link = LinkEstimator(GBPS10)
    x = PipelineInputs(65536, 60000, KVB, 0.3, link)
    assert decide_pipeline(x, RoutingPolicy()).pipeline is Pipeline.DIRECT
    link.started(5e9)  # 4 s of bytes already queued
    assert decide_pipeline(x, RoutingPolicy()).pipeline is Pipeline.RELAY


def test_fixed_policies_and_threshold() -> None:
    x = inputs(65536, 65000)
    assert decide_pipeline(x, RoutingPolicy(PipelinePolicy.ALWAYS_RELAY)).relayed
    assert not decide_pipeline(inputs(65536, 0), RoutingPolicy(PipelinePolicy.NEVER_RELAY)).relayed
    thr = RoutingPolicy(PipelinePolicy.UNCACHED_THRESHOLD, uncached_threshold_tokens=8192)
    assert not decide_pipeline(inputs(65536, 60000), thr).relayed
    assert decide_pipeline(inputs(65536, 50000), thr).relayed


def test_no_relay_available_falls_back_to_direct() -> None:
    d = decide_pipeline(inputs(65536, 0, relay=False), RoutingPolicy())
    assert d.pipeline is Pipeline.DIRECT and "no relay" in d.reason


def test_rld_only_ablation_finishes_low_hit_on_rld() -> None:
    pol = RoutingPolicy(allow_rld_only=True, rld_only_max_hit=0.5)
    assert decide_pipeline(inputs(65536, 1000), pol).pipeline is Pipeline.RLD_ONLY
    # relayed but MD hits more than half: still P->RLD->MD
    slow = inputs(65536, 40000, bw=1e9 / 8)
    assert decide_pipeline(slow, pol).pipeline is Pipeline.RELAY


def _shared_link(rate: float, transfers: list[tuple[float, float, float]]) -> list[float]:
    """Last-byte times of transfers (admitted at P, first byte, bytes) on a fair-shared link
    of ``rate`` bytes/s (processor sharing, work-conserving)."""
    left = {k: b for k, (_, _, b) in enumerate(transfers)}
    done: dict[int, float] = {}
    t = 0.0
    while left:
        active = [k for k in left if transfers[k][1] <= t]
        pending = [transfers[k][1] for k in left if transfers[k][1] > t]
        if not active:
            t = min(pending)
            continue
        share = rate / len(active)
        dt = min(left[k] for k in active) / share
        if pending and min(pending) - t < dt:
            dt = min(pending) - t
        for k in active:
            left[k] -= share * dt
        t += dt
        for k in [k for k in active if left[k] <= 1e-6]:
            del left[k]
            done[k] = t
    return [done[k] for k in range(len(transfers))]


def test_link_estimator_measures_a_known_link_rate() -> None:
    """Transfers wait at P for their prefill before the first byte and share the link with
    others; the estimate is the link's rate. (The old sample, bytes / (admission -> last
    byte) x transfers in flight, counted prefill waits as transfer time and queued transfers
    as sharing: it missed by a wide margin.)"""
    rate = 1.25e9  # 10 Gbit/s
    transfers = []
    for k in range(12):  # a request every 0.8 s, each first byte 0.3-1.5 s after admission
        admit = 0.8 * k
        transfers.append((admit, admit + 0.3 + 0.1 * (k % 13), 0.6e9 + 0.2e9 * (k % 3)))
    last = _shared_link(rate, transfers)
    link = LinkEstimator(GBPS10 / 10)  # a prior far off
    events = sorted(
        [(a, "start", k) for k, (a, _, _) in enumerate(transfers)]
        + [(t, "end", k) for k, t in enumerate(last)]
    )
    for _, kind, k in events:
        admit, first, size = transfers[k]
        if kind == "start":
            link.started(size)
        else:
            link.finished(size, start=admit, first_byte=first, last_byte=last[k])
    assert link.samples == 12 and link.in_flight_bytes == 0
    assert link.bandwidth == pytest.approx(rate, rel=0.02)


def test_link_estimator_ignores_small_and_configured() -> None:
    link = LinkEstimator(GBPS10)
    link.started(1e3)
    link.finished(1e3, start=0.0, first_byte=0.0, last_byte=1.0)  # too small to measure
    assert link.bandwidth == GBPS10 and link.in_flight == 0
    fixed = LinkEstimator(GBPS10, measured=False)
    fixed.started(1e9)
    fixed.finished(1e9, start=0.0, first_byte=0.0, last_byte=100.0)
    assert fixed.bandwidth == GBPS10


def test_relay_when_the_wan_breaks_the_target_not_p_queue_and_a_full_relay_goes_direct() -> None:
    pol = RoutingPolicy(ttft_target_s=2.0)
    warm = PipelineInputs(65536, 62000, KVB, 0.2, LinkEstimator(GBPS10))
    assert decide_pipeline(warm, pol).pipeline is Pipeline.DIRECT
    # P's backlog alone is past the target: the relay hides only the WAN, it cannot meet it
    queued = PipelineInputs(65536, 62000, KVB, 0.2, LinkEstimator(GBPS10), prefill_queue_s=2.5)
    d = decide_pipeline(queued, pol)
    assert d.predicted_ttft_s > 2.5 and d.pipeline is Pipeline.DIRECT
    assert "already past the target" in d.reason
    # queue + prefill within the target, the WAN on top breaks it: relay
    cold_mid = PipelineInputs(65536, 32768, KVB, 0.2, LinkEstimator(GBPS10), prefill_queue_s=1.5)
    d = decide_pipeline(cold_mid, pol)
    assert d.predicted_ttft_s > 2.0 and d.pipeline is Pipeline.RELAY
    cold = dict(
        prompt_len=65536,
        md_cached_tokens=0,
        kv_bytes_per_token=KVB,
        predicted_prefill_s=1.1,
        link=LinkEstimator(GBPS10),
        relay_need_tokens=66560,
    )
    roomy = decide_pipeline(PipelineInputs(**cold, relay_free_tokens=10**6), pol)
    assert roomy.pipeline is Pipeline.RELAY
    # RLD holds no room for it: waiting for RLD's memory would stall P's prefill; go direct
    full = decide_pipeline(PipelineInputs(**cold, relay_free_tokens=30000), pol)
    assert full.pipeline is Pipeline.DIRECT and "relay full" in full.reason


def test_affinity_index_matches_prefix_and_evicts_lru() -> None:
    idx = AffinityIndex({"a": 6, "b": 100})
    idx.insert("a", [1, 2, 3, 4])
    assert idx.match("a", [1, 2, 3, 9]) == 3
    assert idx.match("a", [9]) == 0
    assert idx.match("b", [1, 2]) == 0
    idx.insert("a", [5, 6, 7])  # capacity 6: oldest (1) evicted
    assert idx.match("a", [1, 2]) == 0


def test_choose_instance_prefers_cache_unless_too_busy() -> None:
    pol = SelectionPolicy(affinity_min_match=0.5, balance_abs=2, balance_rel=1.5)
    loads = {"a": 3.0, "b": 1.0}
    assert choose_instance(loads, {"a": 90, "b": 0}, 100, pol) == "a"  # 3 <= 1*1.5+2
    assert choose_instance({"a": 5.0, "b": 1.0}, {"a": 90, "b": 0}, 100, pol) == "b"
    assert choose_instance(loads, {"a": 30, "b": 0}, 100, pol) == "b"  # match too short
    assert choose_instance(loads, None, 100, SelectionPolicy(cache_aware=False)) == "b"
    with pytest.raises(ValueError):
        choose_instance({}, None, 1, pol)


def test_affinity_index_keeps_exactly_the_most_recently_used_hashes() -> None:
    """The index's LRU (bulk touches, lazily dropped stale copies, compaction) evicts as a
    move-to-end ordered dict does, repeats and forgetting included."""
    for cap, universe in ((5, 15), (200, 600), (1000, 100)):  # the last never evicts
        rng = random.Random(cap)
        idx, ref = AffinityIndex({"a": cap}), OrderedDict[int, None]()
        for i in range(3000):
            hashes = [rng.randrange(universe) for _ in range(rng.randrange(universe // 2))]
            idx.insert("a", hashes)
            for h in hashes:
                ref[h] = None
                ref.move_to_end(h)
            while len(ref) > cap:
                ref.popitem(last=False)
            for h in rng.sample(range(universe), 5):
                assert idx.match("a", [h]) == (h in ref)
            if i % 997 == 996:
                idx.forget("a")
                ref.clear()
        assert idx.match("a", list(ref)) == len(ref)


def test_sequencer_orders_and_reports_duplicates() -> None:
    s = TokenSequencer()
    assert s.offer(0, 10, "RLD") == [(0, 10, "RLD")]
    assert s.offer(2, 12, "MD") == []  # early: buffered
    assert s.offer(1, 11, "RLD") == [(1, 11, "RLD"), (2, 12, "MD")]
    assert s.by_origin == {"RLD": 2, "MD": 1}
    with pytest.raises(SeamError, match="arrived twice"):
        s.offer(1, 11, "MD")
    s.offer(4, 14, "MD")
    with pytest.raises(SeamError):
        s.offer(4, 14, "RLD")


def test_sequencer_runs_release_as_their_tokens_one_by_one_would() -> None:
    """A step's run of tokens (offer_run) releases what offering them one at a time does."""
    runs = [(0, [10, 11], "RLD"), (4, [14, 15], "MD"), (2, [12], "RLD"), (3, [13], "MD")]
    runs += [(6, [16, 17, 18], "MD")]
    bulk, single = TokenSequencer(), TokenSequencer()
    for first, ids, origin in runs:
        one = [r for i, tok in enumerate(ids) for r in single.offer(first + i, tok, origin)]
        got = bulk.offer_run(first, list(ids), origin)
        assert [(p + i, t, o) for p, ts, o in got for i, t in enumerate(ts)] == one
    assert bulk.by_origin == single.by_origin == {"RLD": 3, "MD": 6}
    assert bulk.next_position == 9 and not bulk.waiting
    assert bulk.offer_run(11, [21, 22], "MD") == []  # early: buffered
    assert bulk.offer_run(9, [19, 20], "RLD") == [(9, [19, 20], "RLD"), (11, [21, 22], "MD")]
    assert bulk.offer_run(14, [24], "MD") == []
    with pytest.raises(SeamError) as err:  # RLD's 13 releases MD's 14, then its own 14
        bulk.offer_run(13, [23, 24], "RLD")
    assert err.value.ready == [(13, [23], "RLD"), (14, [24], "MD")]  # released, counted
    assert bulk.next_position == 15 and bulk.by_origin == {"RLD": 6, "MD": 9}
    with pytest.raises(SeamError):
        bulk.offer_run(12, [22], "RLD")


def test_link_estimator_is_not_fooled_by_a_slow_prefill() -> None:
    """A pipelined sender waits for each prefill chunk: the link is idle between chunks. A
    busy P spreads a transfer over seconds; counted as transfer time, that made a 10 Gbit/s
    line look like 43 MB/s in a main job and sent every request to the relay. Only the
    sender's active intervals count, and the estimate never exceeds the line."""
    rate, chunk, gap = 1.25e9, 1e8, 0.5  # 100 MB chunks, one every 0.5 s (P-bound)
    link = LinkEstimator(GBPS10, ceiling_bytes_per_s=GBPS10)
    for t0 in (0.0, 10.0, 20.0):
        active = [(t0 + k * gap, t0 + k * gap + chunk / rate) for k in range(10)]
        link.started(10 * chunk)
        link.finished(10 * chunk, start=t0, first_byte=t0, last_byte=active[-1][1], active=active)
    assert link.bandwidth == pytest.approx(rate, rel=0.01)
    whole = LinkEstimator(GBPS10)  # the old sample: [first byte, last byte]
    whole.finished(10 * chunk, start=0.0, first_byte=0.0, last_byte=9 * gap + chunk / rate)
    assert whole.bandwidth < rate / 4
    capped = LinkEstimator(GBPS10, ceiling_bytes_per_s=GBPS10)
    capped.finished(1e9, start=0.0, first_byte=0.0, last_byte=0.1)  # 10 GB/s: buffer effects
    assert capped.bandwidth == GBPS10
