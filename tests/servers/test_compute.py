"""Compute model: roofline costs of prefill, chunked prefill, decode and extend steps."""

from __future__ import annotations

import pytest

from pddbench.errors import UserError
from pddbench.servers import profiles
from pddbench.servers.compute import (
    Machine,
    StepShape,
    decode_step_seconds,
    extend_step_seconds,
    kv_capacity_tokens,
    prefill_chunks,
    prefill_seconds,
    step_cost,
)


def machine(hw: str = "h800-sxm", chips: int = 16, model: str = "pdd-flagship-1t") -> Machine:
    return Machine(profiles.hardware(hw), chips, profiles.model(model), step_overhead_s=0.0005)


def test_profiles_carry_sources_and_flagship_kv_size() -> None:
    flagship = profiles.model("pdd-flagship-1t")
    assert flagship.kv_bytes_per_token == 46490  # 4,649 KB per 100 tokens (PDD report)
    assert flagship.sources and all(profiles.hardware(h).sources for h in ("h800-sxm", "h20"))
    with pytest.raises(UserError, match="unknown hardware profile"):
        profiles.hardware("tpu-v9")


def test_decode_is_memory_bound_and_grows_with_context() -> None:
    m = machine("h20")
    short = step_cost(m, StepShape(decode_batch=8, decode_context=8 * 1024))
    long = step_cost(m, StepShape(decode_batch=8, decode_context=8 * 65536))
    assert short.bound == "memory"
    assert long.seconds > short.seconds
    # 10-30 ms per token: the band the PDD report describes for the flagship
    assert 0.010 <= decode_step_seconds(m, 16, 16 * 65536) <= 0.030


def test_extend_costs_about_one_decode_step_plus_a_little() -> None:
    m = machine("h20")
    one = decode_step_seconds(m, 1, 65536)
    ext = extend_step_seconds(m, 100, 65536)
    assert one < ext < 4 * one
    assert extend_step_seconds(m, 10, 65536) < ext


def test_prefill_is_compute_bound_and_attention_counts_cached_context() -> None:
    m = machine()
    cold = step_cost(m, StepShape(prefill=((8192, 0),)))
    warm = step_cost(m, StepShape(prefill=((8192, 56000),)))
    assert cold.bound == "compute"
    assert warm.seconds > cold.seconds  # attention over the cached prefix is real work
    assert prefill_seconds(m, 6554, 58982, 8192) < prefill_seconds(m, 65536, 0, 8192)


def test_last_partial_chunk_is_a_real_step() -> None:
    m = machine()
    assert prefill_chunks(8193, 8192) == [8192, 1]
    one_chunk = prefill_seconds(m, 8192, 0, 8192)
    plus_one = prefill_seconds(m, 8193, 0, 8192)
    tail = plus_one - one_chunk
    # A 1-token tail pays the weight read, collectives and overhead: far more than 1/8192 of
    # a chunk (the "singular points" of the bathtub).
    assert tail > 0.1 * one_chunk


def test_zero_compute_costs_only_the_overhead() -> None:
    m = Machine(profiles.hardware("zero-compute"), 1, profiles.model("pdd-flagship-1t"), 0.002)
    assert step_cost(m, StepShape(prefill=((65536, 0),), decode_batch=64)).seconds == 0.002
    assert step_cost(m, StepShape()).seconds == 0.0


def test_kv_capacity_is_hbm_minus_weights() -> None:
    m = machine("h20")
    cap = kv_capacity_tokens(m, 0.1)
    expect = (16 * 96e9 * 0.9 - 1.04e12) // 46490
    assert cap == int(expect)
    with pytest.raises(UserError, match="do not fit"):
        kv_capacity_tokens(machine("h800-sxm", chips=8))
