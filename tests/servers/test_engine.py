"""The per-instance scheduler: admission by KV memory, chunked prefill, decode, extend."""

from __future__ import annotations

from pddbench.servers import profiles
from pddbench.servers.compute import Machine, StepShape, step_cost
from pddbench.servers.engine import (
    Admitted,
    Engine,
    ExtendDone,
    Phase,
    PrefillDone,
    PrefillProgress,
    Refused,
    SchedulerConfig,
    Seq,
    TokenOut,
)
from pddbench.servers.radix import KvPool
from pddbench.servers.tokens import TokenStream

BS = 16


def engine(capacity: int = 100_000, hw: str = "h800-sxm", chips: int = 16, **cfg: object) -> Engine:
    m = Machine(profiles.hardware(hw), chips, profiles.model("pdd-flagship-1t"), 0.0005)
    return Engine(m, KvPool(capacity, BS), SchedulerConfig(**cfg))  # type: ignore[arg-type]


def seq(rid: str, n: int, *, hashes: list[int] | None = None, **kw: object) -> Seq:
    h = hashes if hashes is not None else [sum(map(ord, rid)) * 10**6 + i for i in range(n // BS)]
    return Seq(rid=rid, prompt_len=n, hashes=h, stream=TokenStream(0, rid, 1000), **kw)  # type: ignore[arg-type]


def run(e: Engine, t: float = 0.0, limit: int = 10_000) -> tuple[list[object], float]:
    out: list[object] = []
    for _ in range(limit):
        step = e.plan(t)
        if step is None:
            break
        t += step.duration
        out.extend(e.complete(step, t))
        out.extend(e.admit(t))
    return out, t


def test_colocated_request_prefills_in_chunks_then_decodes() -> None:
    e = engine(chunk_tokens=1000)
    ev = e.submit(seq("a", 2500, max_tokens=3, compute_prompt=True, reserve_output=3), 0.0)
    assert ev == [Admitted("a", 0, 0.0)]
    events, _ = run(e)
    progress = [x.computed for x in events if isinstance(x, PrefillProgress)]
    assert progress == [1000, 2000, 2500]  # the last partial chunk is its own step
    done = [x for x in events if isinstance(x, PrefillDone)]
    assert done[0].chunks == 3
    toks = [x for x in events if isinstance(x, TokenOut)]
    assert [x.position for x in toks] == [0, 1, 2]
    assert toks[-1].finish == "length" and toks[0].finish is None
    assert [x.token for x in toks] == [TokenStream(0, "a", 1000).token(i) for i in range(3)]
    assert e.pool.private_tokens == 0 and not e.has_work()


def test_chunk_time_matches_compute_model() -> None:
    e = engine(chunk_tokens=1000)
    e.submit(seq("a", 2500, max_tokens=1, compute_prompt=True, decode_after_kv=False), 0.0)
    step = e.plan(0.0)
    assert step is not None
    assert step.duration == step_cost(e.machine, StepShape(prefill=((1000, 0),))).seconds


def test_prefix_hit_skips_cached_blocks() -> None:
    e = engine()
    shared = list(range(10))
    e.submit(
        seq("a", 160, hashes=shared, max_tokens=1, compute_prompt=True, decode_after_kv=False), 0.0
    )
    run(e)
    e.release("a")  # P done sending: blocks stay cached, unpinned
    ev = e.submit(
        seq(
            "b",
            200,
            hashes=[*shared, 99, 98],
            max_tokens=1,
            compute_prompt=True,
            decode_after_kv=False,
        ),
        1.0,
    )
    assert ev == [Admitted("b", 160, 1.0)]
    assert e.stats.cache_hit_tokens == 160 and e.stats.cache_query_tokens == 360


def test_match_never_covers_the_whole_prompt() -> None:
    e = engine()
    h = list(range(10))
    e.submit(seq("a", 160, hashes=h, max_tokens=1, compute_prompt=True, decode_after_kv=False), 0)
    run(e)
    e.release("a")
    ev = e.submit(
        seq("b", 160, hashes=h, max_tokens=1, compute_prompt=True, decode_after_kv=False), 1
    )
    assert ev == [Admitted("b", 144, 1)]  # at least the last block is computed again


def test_admission_queues_when_kv_is_full_then_evicts_cache() -> None:
    e = engine(capacity=1000)
    a = seq("a", 600, max_tokens=100, reserve_output=100)
    b = seq("b", 400, max_tokens=100, reserve_output=100)
    assert e.submit(a, 0) == [Admitted("a", 0, 0)]
    assert e.submit(b, 0) == []  # 700 + 500 > 1000: waits
    assert e.queue_depth == 1
    e.kv_landed("a", 0.1)
    events, _ = run(e, 0.1)
    assert any(isinstance(x, Admitted) and x.rid == "b" for x in events)  # after a freed
    assert e.pool.tree.blocks * BS + e.pool.private_tokens <= 1000


def test_request_larger_than_capacity_is_refused() -> None:
    e = engine(capacity=1000)
    ev = e.submit(seq("big", 990, max_tokens=100, reserve_output=100), 0)
    assert isinstance(ev[0], Refused) and "at most 1000" in ev[0].message
    assert not e.has_work()


def test_decode_batches_all_running_sequences_up_to_max_batch() -> None:
    e = engine(max_batch=2)
    for r in "abc":
        e.submit(seq(r, 64, max_tokens=5, reserve_output=5), 0)
        e.kv_landed(r, 0)  # emits position 0 at once
    step = e.plan(0.0)
    assert step is not None and len(step.decode) == 2
    events, _ = run(e)
    per = {r: [x.position for x in events if isinstance(x, TokenOut) and x.rid == r] for r in "abc"}
    assert per == {"a": [1, 2, 3, 4], "b": [1, 2, 3, 4], "c": [1, 2, 3, 4]}


def test_extend_then_continue_decoding_from_the_seam() -> None:
    e = engine(hw="h20")
    s = seq("m", 640, max_tokens=200, decode_after_kv=False, reserve_output=200)
    e.submit(s, 0)
    assert e.kv_landed("m", 0) == []  # main-decode holds: no token yet
    assert s.phase is Phase.HOLD
    assert e.extend("m", 64, False, 0) == []
    step = e.plan(0)
    assert step is not None and step.extend == [(s, 64)]
    assert step.duration == step_cost(e.machine, StepShape(extend=((64, 640),))).seconds
    ev = e.complete(step, step.duration)
    assert ev == [ExtendDone("m", 64, 64, 0, step.duration)]
    assert s.phase is Phase.HOLD
    e.extend("m", 10, True, 1.0)
    step = e.plan(1.0)
    assert step is not None
    ev = e.complete(step, 2.0)
    toks = [x for x in ev if isinstance(x, TokenOut)]
    assert [t.position for t in toks] == [74]  # the final extend emits the next token
    events, _ = run(e, 2.0)
    positions = [x.position for x in events if isinstance(x, TokenOut)]
    assert positions == list(range(75, 200))


def test_final_empty_extend_emits_known_token_and_adopt_decodes_on() -> None:
    e = engine()
    e.submit(seq("x", 64, max_tokens=10, decode_after_kv=False, reserve_output=10), 0)
    e.kv_landed("x", 0)
    assert [t.position for t in e.extend("x", 0, True, 0)] == [0]  # type: ignore[attr-defined]
    e2 = engine()
    e2.submit(seq("y", 64, max_tokens=10, decode_after_kv=False, reserve_output=10), 0)
    e2.kv_landed("y", 0)
    assert e2.adopt("y", 6, 0) == []
    events, _ = run(e2)
    assert [x.position for x in events if isinstance(x, TokenOut)] == [6, 7, 8, 9]


def test_release_mid_step_drops_the_sequence_cleanly() -> None:
    e = engine()
    e.submit(seq("a", 64, max_tokens=50, reserve_output=50), 0)
    e.kv_landed("a", 0)
    step = e.plan(0)
    e.release("a")
    assert step is not None and e.complete(step, 1) == []
    assert e.pool.private_tokens == 0 and not e.has_work()


def test_eos_respects_min_tokens_and_ignore_eos() -> None:
    e = engine()
    s = seq("e", 64, max_tokens=4000, min_tokens=5, ignore_eos=False, reserve_output=4000)
    s.stream = TokenStream(0, "e", 1000, eos_probability=0.05)
    e.submit(s, 0)
    e.kv_landed("e", 0)
    events, _ = run(e)
    toks = [x for x in events if isinstance(x, TokenOut)]
    last = toks[-1]
    assert last.finish == "stop" and last.token == 999 and last.position >= 5
    assert len(toks) == last.position  # positions 1..last (0 was emitted at landing)
