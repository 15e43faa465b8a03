"""Speculative decoding in the reference servers: the draws, the step pricing, the stream."""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import Counter

import pytest

from pddbench.errors import UserError
from pddbench.servers.compute import StepShape, step_cost
from pddbench.servers.config import Role, parse_deployment
from pddbench.servers.engine import Engine, TokenOut
from pddbench.servers.speculative import (
    Speculation,
    draw_key,
    expected_accept_len,
    step_tokens,
)

from .helpers import Completion, agentic_prompts, deployment, running
from .test_e2e import check_exactly_once, drive, relay_deployment
from .test_engine import engine, run, seq

MTP = Speculation(draft_tokens=2, acceptance=0.85)


def spec_engine(spec: Speculation) -> Engine:
    return engine(capacity=2_000_000, hw="h20", speculation=spec)


def test_draws_are_deterministic_bounded_and_average_the_expected_accept_len() -> None:
    spec = Speculation(draft_tokens=3, acceptance=0.7)
    key = draw_key(0, "r")
    draws = [step_tokens(spec, key, p) for p in range(20_000)]
    assert draws == [step_tokens(spec, draw_key(0, "r"), p) for p in range(20_000)]
    assert set(draws) == {1, 2, 3}
    assert expected_accept_len(spec) == pytest.approx(1 + 0.7 + 0.49)
    assert statistics.fmean(draws) == pytest.approx(expected_accept_len(spec), rel=0.02)
    assert draws != [step_tokens(spec, draw_key(1, "r"), p) for p in range(20_000)]  # the seed
    assert draws != [step_tokens(spec, draw_key(0, "q"), p) for p in range(20_000)]  # the rid
    assert {step_tokens(Speculation(), key, p) for p in range(100)} == {1}
    assert expected_accept_len(MTP) == pytest.approx(1.85)  # Ant's 1.8-1.9 at 2 draft tokens


def decode_all(e: Engine, batch: int, prompt: int, out: int) -> list[TokenOut]:
    for k in range(batch):
        rid = f"s{k}"
        e.submit(seq(rid, prompt, max_tokens=out, reserve_output=out), 0.0)
        e.kv_landed(rid, 0.0)  # position 0 (P's first token) emitted at landing
    events, _ = run(e)
    return [x for x in events if isinstance(x, TokenOut)]


def test_draft_tokens_1_reproduces_plain_decoding_exactly() -> None:
    plain = spec_engine(Speculation())
    off = spec_engine(Speculation(draft_tokens=1, acceptance=0.9))
    a, b = decode_all(plain, 8, 4096, 50), decode_all(off, 8, 4096, 50)
    assert a == b
    e2 = spec_engine(Speculation())
    for k in range(4):
        e2.submit(seq(f"s{k}", 1024, max_tokens=3, reserve_output=3), 0.0)
        e2.kv_landed(f"s{k}", 0.0)
    step = e2.plan(0.0)
    assert step is not None
    shape = StepShape(decode_batch=4, decode_context=4 * 1025)
    assert step.duration == step_cost(e2.machine, shape).seconds


def test_modelled_tpot_is_step_time_over_expected_accept_len() -> None:
    batch, prompt, out = 32, 4096, 601
    e = spec_engine(MTP)
    for k in range(batch):
        e.submit(seq(f"s{k}", prompt, max_tokens=out, reserve_output=out), 0.0)
        e.kv_landed(f"s{k}", 0.0)
    step = e.plan(0.0)
    assert step is not None and not step.extend and len(step.decode) == batch
    # a speculative decode step is priced as calibration.shape_for prices an MTP point
    verify = StepShape(extend=((2, prompt),) * batch)
    assert step.duration == step_cost(e.machine, verify).seconds
    events, _ = run(e)
    toks = [x for x in events if isinstance(x, TokenOut)]
    by: dict[str, list[TokenOut]] = {}
    for t in toks:
        by.setdefault(t.rid, []).append(t)
    mid = StepShape(extend=((2, prompt + out // 2),) * batch)
    want = step_cost(e.machine, mid).seconds / expected_accept_len(MTP)
    tpots = []
    for rid, ts in by.items():
        assert [t.position for t in ts] == list(range(1, out)), rid  # each exactly once
        assert ts[-1].finish == "length"
        tpots.append(ts[-1].t / (out - 1))  # the first token came at t = 0 (KV landed)
    assert statistics.fmean(tpots) == pytest.approx(want, rel=0.04)
    plain = spec_engine(Speculation())
    ptoks = decode_all(plain, batch, prompt, out)
    p0 = [t for t in ptoks if t.rid == "s0"]
    plain_tpot = p0[-1].t / (out - 1)
    assert statistics.fmean(tpots) < 0.75 * plain_tpot  # speculation pays on H20 decode


def test_a_step_emits_at_most_draft_tokens_and_stops_at_eos() -> None:
    e = spec_engine(Speculation(draft_tokens=4, acceptance=0.9))
    toks = decode_all(e, 3, 256, 37)
    for k in range(3):
        mine = [t for t in toks if t.rid == f"s{k}"]
        assert [t.position for t in mine] == list(range(1, 37))
        burst = max(sum(1 for t in mine if t.t == x.t) for x in mine)
        assert 1 < burst <= 4
    e = spec_engine(Speculation(draft_tokens=4, acceptance=0.9))
    s = seq("e", 64, max_tokens=4000, ignore_eos=False, reserve_output=4000)
    s.stream.eos_probability = 0.05
    e.submit(s, 0)
    e.kv_landed("e", 0)
    events, _ = run(e)
    mine = [x for x in events if isinstance(x, TokenOut)]
    assert mine[-1].finish == "stop" and [t.position for t in mine] == list(range(1, len(mine) + 1))
    assert e.pool.private_tokens == 0 and not e.has_work()


def test_deployment_setting_applies_to_every_decoding_role_and_never_to_prefill() -> None:
    spec = deployment(
        "pdd",
        {"prefill": 1, "relay-decode": 1, "main-decode": 1},
        speculative={"draft_tokens": 2, "acceptance": 0.85},
    )
    dep = parse_deployment(spec, "test")
    for inst in dep.instances:
        if inst.role is Role.ROUTER:
            continue
        want = Speculation() if inst.role is Role.PREFILL else MTP
        assert dep.engine_config(inst).speculation == want
    assert parse_deployment(deployment("pd", {"prefill": 1, "decode": 1}), "t").speculative == (
        type(dep.speculative)()
    )  # off unless set
    for bad in ({"draft_tokens": 0}, {"acceptance": 1.5}, {"draft": 2}):
        with pytest.raises(UserError, match="speculative"):
            parse_deployment({**spec, "speculative": bad}, "test")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["catch-up", "adaptive", "kv"])
def test_pdd_with_speculation_every_token_exactly_once_across_the_seam(mode: str) -> None:
    """RLD and MD both speculate (bursts of up to 3 tokens); the seam still holds."""
    rng = random.Random(5)
    sessions = 30
    spec = relay_deployment(mode)
    spec["speculative"] = {"draft_tokens": 3, "acceptance": 0.8}
    slow = {
        "md0": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
        "md1": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
    }
    prompts = agentic_prompts(rng, sessions=sessions, turns=2, system=256, step=900)

    async def main() -> list[tuple[str, int, Completion]]:
        async with running(spec, slow) as (_, url, _):
            return await drive(url, prompts, 2, rng, lo=40, hi=70, tag=f"mtp-{mode}")

    results = asyncio.run(main())
    assert len(results) == 2 * sessions
    check_exactly_once(results)
    stories = [c.pdd for _, _, c in results]
    handed = [s for s in stories if s["handoff"] and s["handoff"]["seam"] is not None]
    assert handed, Counter(s["handoff_mode"] for s in stories)
    for s in handed:  # the seam is where RLD stopped and MD began
        assert s["tokens_by_origin"].get("RLD", 0) == s["handoff"]["seam"]
        assert s["finish_origin"] == "MD"
    streamed = [c for _, _, c in results if c.chunks]
    # tokens of one step travel in one chunk: fewer chunks than tokens
    assert sum(c.chunks for c in streamed) < 0.8 * sum(len(c.ids) for c in streamed)


@pytest.mark.timeout(120)
def test_relay_that_ends_within_a_speculative_step_finishes_on_rld() -> None:
    """Every step emits up to 4 tokens, so a request's last step often carries several
    tokens, its last one included: RLD decides a handoff after all of a step's tokens (a
    final batch that ended where the request does would have MD emit one past the end);
    whoever produced the last token is the one that ended the request."""
    rng = random.Random(6)
    spec = relay_deployment("one-shot")
    spec["speculative"] = {"draft_tokens": 4, "acceptance": 1.0}
    slow = {
        "md0": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
        "md1": {"rate_bytes_per_s": 3e6, "delay_s": 0.02},
    }
    prompts = agentic_prompts(rng, sessions=24, turns=1, system=256, step=900)

    async def main() -> list[tuple[str, int, Completion]]:
        async with running(spec, slow) as (_, url, _):
            return await drive(url, prompts, 1, rng, lo=5, hi=25, tag="mtp-end")

    results = asyncio.run(main())
    check_exactly_once(results)
    origins = Counter(c.pdd["finish_origin"] for _, _, c in results if c.pdd)
    assert origins["RLD"] > 0, origins
    for _, n, c in results:  # whoever produced the last token ended the request
        by = c.pdd["tokens_by_origin"]
        assert c.pdd["finish_origin"] == ("RLD" if by.get("RLD", 0) == n else "MD"), c.pdd
