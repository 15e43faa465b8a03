"""Compute model: what one forward pass of a serving instance costs, in seconds (sans-IO).

Owns the roofline formulas that stand in for the GPU. Everything here is a pure function of
a :class:`Machine` (hardware profile × chip count × model profile) and a :class:`StepShape`
(what one batched forward pass contains). No clocks, no I/O, no scheduling decisions.

A step (one forward pass) may contain prefill chunks, extend segments and decode tokens.
With

* ``n_i`` new tokens of prefill chunk *i* on top of ``c_i`` tokens already in KV,
* ``k_j`` tokens of extend segment *j* on top of ``c_j`` tokens (an extend is priced as a
  short prefill: multi-token verification / Extend-Decode handoff),
* a decode batch of ``B`` sequences whose contexts sum to ``S``,

the step processes ``T = Σn_i + Σk_j + B`` tokens and costs::

    F_lin  = 2 · N_active · T                                    (GEMM FLOPs)
    F_attn = a_p · [Σ n_i (c_i + (n_i+1)/2) + Σ k_j (c_j + (k_j+1)/2)] + a_d · S
    W      = weight_bytes · (1 − (1 − ρ)^T),  ρ = N_active / N_total
             (expected share of MoE weights touched by T tokens routed independently;
              = all weights for a dense model, ≈ active weights for T = 1)
    K      = s_kv · [Σ (c_i + n_i) + Σ (c_j + k_j) + S]             (KV read + written)
    X      = x_tok · T   if chips > 1 else 0                    (scale-up traffic)

    L      = layers · collectives_per_layer · t_collective   if chips > 1 else 0

    t = max( (F_lin + F_attn) / (chips · P_dtype · η_c),
             (W + K)          / (chips · BW_hbm  · η_m),
             X                / (chips · BW_ic) )  +  L  +  t_overhead

where ``a_p``/``a_d`` are the model's attention FLOPs per (query, context) pair for
prefill/decode, ``s_kv`` its KV bytes per token, ``P_dtype`` the chip's dense peak for the
model's compute dtype, ``η_c``/``η_m`` the profile's achievable fractions of peak, and
``L`` the latency of the small-message collectives every layer waits for (MoE
dispatch/combine or TP all-reduce; it dominates decode of a large MoE spread over many
chips), and ``t_overhead`` a fixed per-step host cost (scheduling, kernel launches).

Consequences the benchmark relies on:

* a decode step is memory-bound: its cost is set by weights touched plus KV read, so
  extending ``k`` tokens costs about one decode step plus the extra compute and the extra
  experts those tokens touch;
* chunked prefill pays ``W + t_overhead`` per chunk, so the last partial chunk of a prompt
  costs nearly as much as a full one when it is small (the "singular points" of the
  bathtub) unless the scheduler packs it with other work;
* KV capacity of an instance is its HBM minus weights minus a reserve, in tokens.

The ``zero-compute`` hardware profile makes every term zero: a step costs ``t_overhead``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pddbench.errors import UserError
from pddbench.servers.profiles import HardwareProfile, ModelProfile


@dataclass(frozen=True)
class Machine:
    """One serving instance as the cost model sees it."""

    hardware: HardwareProfile
    chips: int
    model: ModelProfile
    step_overhead_s: float = 0.0005

    def __post_init__(self) -> None:
        if self.chips < 1:
            raise UserError(f"an instance needs at least one chip, got {self.chips}")


@dataclass(frozen=True)
class StepShape:
    """What one forward pass contains."""

    prefill: tuple[tuple[int, int], ...] = ()  # (new tokens, context already in KV) per chunk
    extend: tuple[tuple[int, int], ...] = ()  # (k tokens, context already in KV) per sequence
    decode_batch: int = 0
    decode_context: int = 0  # summed context length over the decode batch

    @property
    def tokens(self) -> int:
        return sum(n for n, _ in self.prefill) + sum(k for k, _ in self.extend) + self.decode_batch


@dataclass(frozen=True)
class StepCost:
    seconds: float
    flops: float
    hbm_bytes: float
    comm_bytes: float
    bound: str  # "compute" | "memory" | "interconnect" | "overhead"


def _div(x: float, rate: float) -> float:
    if x <= 0:
        return 0.0
    return 0.0 if math.isinf(rate) else x / rate


def step_cost(m: Machine, shape: StepShape) -> StepCost:
    """Price one forward pass (formulas in the module docstring)."""
    t = shape.tokens
    if t <= 0:
        return StepCost(0.0, 0.0, 0.0, 0.0, "overhead")
    md, hw = m.model, m.hardware
    pairs_p = 0.0
    kv_tokens = float(shape.decode_context)
    for n, c in (*shape.prefill, *shape.extend):
        pairs_p += n * (c + (n + 1) / 2)
        kv_tokens += c + n
    flops = 2.0 * md.active_params * t + md.attn_flops_per_pair * pairs_p
    flops += md.decode_attn_flops_per_pair * shape.decode_context
    touched = 1.0 - (1.0 - md.active_fraction) ** t
    hbm = md.weight_bytes * touched + md.kv_bytes_per_token * kv_tokens
    comm = md.comm_bytes_per_token * t if m.chips > 1 else 0.0
    t_compute = _div(flops, m.chips * hw.peak_flops(md.compute_dtype) * hw.compute_efficiency)
    t_memory = _div(hbm, m.chips * hw.hbm_bytes_per_s * hw.memory_efficiency)
    t_comm = _div(comm, m.chips * hw.interconnect_bytes_per_s)
    body = max(t_compute, t_memory, t_comm)
    latency = md.layers * md.collectives_per_layer * hw.collective_latency_s if m.chips > 1 else 0.0
    if body <= 0:
        bound = "overhead"
    elif body == t_compute:
        bound = "compute"
    elif body == t_memory:
        bound = "memory"
    else:
        bound = "interconnect"
    return StepCost(body + latency + m.step_overhead_s, flops, hbm, comm, bound)


def prefill_chunks(uncached: int, chunk_tokens: int) -> list[int]:
    """How a prompt's uncached tokens are cut into chunks (last one may be partial)."""
    if uncached <= 0:
        return []
    full, rest = divmod(uncached, chunk_tokens)
    return [chunk_tokens] * full + ([rest] if rest else [])


def prefill_seconds(m: Machine, uncached: int, cached: int, chunk_tokens: int) -> float:
    """Time to prefill one prompt alone: one step per chunk, attention over what came before."""
    total = 0.0
    ctx = cached
    for n in prefill_chunks(uncached, chunk_tokens):
        total += step_cost(m, StepShape(prefill=((n, ctx),))).seconds
        ctx += n
    return total


def decode_step_seconds(m: Machine, batch: int, context_sum: int) -> float:
    return step_cost(m, StepShape(decode_batch=batch, decode_context=context_sum)).seconds


def extend_step_seconds(
    m: Machine, k: int, context: int, batch: int = 0, context_sum: int = 0
) -> float:
    """A step that extends one sequence by ``k`` tokens alongside a decode batch."""
    shape = StepShape(extend=((k, context),), decode_batch=batch, decode_context=context_sum)
    return step_cost(m, shape).seconds


def kv_capacity_tokens(m: Machine, reserve_fraction: float = 0.1) -> int:
    """KV tokens an instance can hold: HBM minus weights minus an activation reserve."""
    hbm = m.hardware.hbm_bytes * m.chips
    free = hbm * (1.0 - reserve_fraction) - m.model.weight_bytes
    if free <= 0:
        raise UserError(
            f"{m.model.name} weights ({m.model.weight_bytes / 1e9:.0f} GB) do not fit in "
            f"{m.chips} x {m.hardware.name} ({hbm / 1e9:.0f} GB HBM, "
            f"{reserve_fraction:.0%} reserved); use more chips per instance"
        )
    return int(free // m.model.kv_bytes_per_token)
