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
    kv_copy_seconds,
    prefill_chunks,
    prefill_seconds,
    step_cost,
    weights_touched_bytes,
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


def test_long_context_mla_decode_on_h20_is_attention_compute_bound_at_bf16() -> None:
    # ~180 FLOP per KV byte against an H20 BF16 ridge of ~37: compute, not memory, bounds it
    m = machine("h20")
    c = step_cost(m, StepShape(decode_batch=110, decode_context=110 * 65536))
    assert c.bound == "attention"
    md = m.model
    floor = md.decode_attn_flops_per_pair * 110 * 65536 / (16 * m.hardware.peak_flops("bf16"))
    assert c.attention_s >= floor  # priced at the BF16 peak, never the FP8 one
    fp8 = Machine(m.hardware, 16, md, attention_dtype="fp8")
    assert step_cost(fp8, StepShape(decode_batch=110, decode_context=110 * 65536)).seconds < (
        c.seconds
    )


def test_collective_latency_depends_on_topology_not_chip() -> None:
    model = profiles.model("llama-3.1-70b")
    one_node = Machine(profiles.hardware("h800-sxm"), 8, model)
    two_nodes = Machine(profiles.hardware("h800-sxm"), 16, model)
    assert not one_node.cross_node and two_nodes.cross_node
    a = step_cost(one_node, StepShape(decode_batch=1, decode_context=1000)).latency_s
    b = step_cost(two_nodes, StepShape(decode_batch=1, decode_context=1000)).latency_s
    assert b > 5 * a > 0
    alone = Machine(profiles.hardware("h800-sxm"), 1, profiles.model("llama-3.1-8b"))
    assert alone.collective_latency_s == 0.0  # one chip: no collective, only the layer floor
    floor = alone.model.layers * alone.hardware.layer_floor(moe=False)
    assert step_cost(alone, StepShape(decode_batch=1, decode_context=10)).latency_s == floor


def test_weights_touched_are_dense_plus_the_experts_tokens_reach() -> None:
    m = machine("h20")
    md = m.model
    one = weights_touched_bytes(m, 1)
    assert one == pytest.approx(md.dense_weight_bytes + md.expert_weight_bytes * 8 / 384)
    many = weights_touched_bytes(m, 4096)
    assert many == pytest.approx(md.weight_bytes, rel=1e-6)  # every expert is reached
    t = 32
    share = 1 - (1 - 8 / 384) ** t
    assert weights_touched_bytes(m, t) == pytest.approx(
        md.dense_weight_bytes + md.expert_weight_bytes * share
    )
    dp = Machine(m.hardware, 16, md, attention_dp=True)  # each chip reads its dense copy
    assert weights_touched_bytes(dp, 1) - one == pytest.approx(15 * md.dense_weight_bytes)


def test_int4_profile_holds_more_kv_and_runs_gemms_at_bf16() -> None:
    fp8 = machine("h20")
    int4 = machine("h20", model="pdd-flagship-1t-int4")
    assert int4.model.gemm_dtype == "bf16" and fp8.model.gemm_dtype == "fp8"
    assert kv_capacity_tokens(int4) > 2 * kv_capacity_tokens(fp8)
    assert int4.model.weight_bytes < 0.7 * fp8.model.weight_bytes
    cold = StepShape(prefill=((8192, 0),))
    assert step_cost(int4, cold).gemm_s > 1.5 * step_cost(fp8, cold).gemm_s


def test_kv_handoff_copy_counts_calls_and_bytes() -> None:
    m = machine()
    hw = m.hardware
    t = kv_copy_seconds(m, 100, 64)
    calls = 61 * 2
    assert t == pytest.approx(
        calls * hw.copy_call_latency_s + 100 * 46490 / hw.host_copy_bytes_per_s
    )
    assert kv_copy_seconds(m, 0, 64) == 0.0


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
    expect = (16 * 96e9 * 0.9 - m.model.weight_bytes) // 46490
    assert cap == int(expect)
    with pytest.raises(UserError, match="do not fit"):
        kv_capacity_tokens(machine("h800-sxm", chips=8))


def test_fp8_attention_changes_a_long_context_h20_prefill_step() -> None:
    # an 8K chunk on top of 56K cached context on 16 x H20: attention dominates the step
    hw, md = profiles.hardware("h20"), profiles.model("pdd-flagship-1t")
    shape = StepShape(prefill=((8192, 57344),))
    bf16 = step_cost(Machine(hw, 16, md, attention_dtype="bf16"), shape)
    fp8 = step_cost(Machine(hw, 16, md, attention_dtype="fp8"), shape)
    assert bf16.bound == "attention"
    assert fp8.seconds < 0.8 * bf16.seconds
    # the attention part shrinks by the FP8 kernels' speedup, not by the FP8 peak's 2x
    assert bf16.attention_s / fp8.attention_s == pytest.approx(hw.attention_fp8_speedup)
    assert hw.attention_fp8_speedup < hw.peak_flops("fp8") / hw.peak_flops("bf16")


def test_dense_and_moe_models_use_their_own_gemm_efficiencies() -> None:
    hw = profiles.hardware("h100-sxm")
    assert hw.gemm_efficiencies(moe=False) != hw.gemm_efficiencies(moe=True)
    dense = Machine(hw, 2, profiles.model("llama-2-70b-fp8"))
    prefill = step_cost(dense, StepShape(prefill=((4096, 0),) * 8))
    flops = 2 * dense.model.active_params * 4096 * 8
    eff = hw.gemm_efficiencies(moe=False)[0]
    assert prefill.gemm_s == pytest.approx(flops / (2 * hw.peak_flops("fp8") * eff), rel=1e-9)


def test_small_batch_moe_decode_pays_a_floor_per_layer() -> None:
    m = machine("h200-sxm", chips=8, model="deepseek-v3")
    c = step_cost(m, StepShape(decode_batch=1, decode_context=256))
    md, hw = m.model, m.hardware
    assert hw.layer_floor(moe=True) > 0
    floor = md.layers * hw.layer_floor(moe=True)
    assert c.latency_s == pytest.approx(
        floor + md.layers * md.collectives_per_layer * m.collective_latency_s
    )
    assert c.seconds > floor + c.gemm_s


def test_a_dense_step_carrying_prefill_pays_the_context_phase_floor() -> None:
    hw = profiles.hardware("h100-sxm")
    m = Machine(hw, 1, profiles.model("gpt-j-6b-fp8"))
    assert hw.dense_prefill_layer_floor_s > 0
    prefill = step_cost(m, StepShape(prefill=((128, 0),)))
    decode = step_cost(m, StepShape(decode_batch=128, decode_context=128 * 128))
    layers = m.model.layers
    assert prefill.latency_s == pytest.approx(layers * hw.layer_floor(moe=False, prefill=True))
    assert decode.latency_s == pytest.approx(layers * hw.layer_floor(moe=False))
    assert prefill.latency_s - decode.latency_s == pytest.approx(
        layers * hw.dense_prefill_layer_floor_s
    )
    # a MoE model keeps its one floor per layer, prefill or not
    moe = machine("h800-sxm", chips=8, model="deepseek-v3")
    a = step_cost(moe, StepShape(prefill=((128, 0),))).latency_s
    b = step_cost(moe, StepShape(decode_batch=128, decode_context=128 * 128)).latency_s
    assert a == pytest.approx(b)


def test_kv_read_factor_multiplies_the_decode_kv_reads_only() -> None:
    hw, md = profiles.hardware("h100-sxm"), profiles.model("falcon-180b-fp8")
    shared, unshared = Machine(hw, 4, md), Machine(hw, 4, md, kv_read_factor=3.0)
    decode = StepShape(decode_batch=64, decode_context=64 * 3000)
    a, b = step_cost(shared, decode), step_cost(unshared, decode)
    assert b.hbm_bytes - a.hbm_bytes == pytest.approx(2.0 * md.kv_bytes_per_token * 64 * 3000)
    assert b.seconds > a.seconds
    prefill = StepShape(prefill=((2048, 0),))
    assert step_cost(unshared, prefill).hbm_bytes == step_cost(shared, prefill).hbm_bytes


def test_a_dense_tp_all_reduce_is_serial_and_moe_dispatch_overlaps() -> None:
    hw = profiles.hardware("h100-sxm")
    assert hw.allreduce_efficiency > 0
    dense = Machine(hw, 8, profiles.model("falcon-180b-fp8"))
    c = step_cost(dense, StepShape(prefill=((2048, 0),)))
    ring = 2 * 7 / 8 * dense.model.comm_bytes_per_token * 2048
    assert c.comm_s == pytest.approx(ring / (hw.interconnect_bytes_per_s * hw.allreduce_efficiency))
    assert c.seconds == pytest.approx(
        c.gemm_s + c.attention_s + c.comm_s + c.latency_s + dense.step_overhead_s
    )
    moe = machine("h800-sxm", chips=8, model="deepseek-v3")
    m = step_cost(moe, StepShape(prefill=((2048, 0),)))
    body = max(m.gemm_s + m.attention_s, m.comm_s)
    assert m.seconds == pytest.approx(body + m.latency_s + moe.step_overhead_s)
