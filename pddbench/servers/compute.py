"""Compute model: what one forward pass of a serving instance costs, in seconds (sans-IO).

Owns the roofline formulas that stand in for the GPU, priced per operation class. Everything
here is a pure function of a :class:`Machine` (hardware profile × chip count × model profile)
and a :class:`StepShape` (what one batched forward pass contains). No clocks, no I/O, no
scheduling decisions. The calibration against public measurements lives in
:mod:`pddbench.servers.calibration` (docs/calibration.md).

A step (one forward pass) may contain prefill chunks, extend segments and decode tokens.
With ``n_i`` new tokens of prefill chunk *i* on top of ``c_i`` cached tokens, extend
segments of ``k_j`` tokens on top of ``c_j`` (Extend-Decode handoff, MTP verification), and
a decode batch of ``B`` sequences whose contexts sum to ``S``, the step processes
``T = Σn_i + Σk_j + B`` tokens over ``N`` chips and costs::

    GEMMs       F_g = 2 · N_active · (T_p / η_gp + T_d / η_gd)   at the GEMM dtype's peak
                      (prefill tokens T_p run large GEMMs at η_gp; decode and extend tokens
                       T_d run the small per-expert GEMMs of a decode step at η_gd)
                W   = W_dense · r + W_experts · (1 − (1 − k/E)^T)
                      (dense weights always read: once per chip with data-parallel
                       attention (r = N), once when tensor-parallel (r = 1); experts: the
                       expected share of E experts that T tokens routed top-k touch)
                t_g = max(F_g / (N · P_gemm), W / (N · BW · η_mem))
    attention   F_a = a_p · Σ n_i (c_i + (n_i+1)/2)                  (prefill form)
                    + a_d · [Σ k_j (c_j + (k_j+1)/2) + S]            (decode/absorbed form)
                K   = s_kv · [Σ (c_i + n_i) + ρ · (Σ (c_j + k_j) + S)]  (KV read + written;
                      ρ = kv_read_factor: 1 where the decode kernel loads a KV head once for
                      its query group, more for a kernel that loads it per query head)
                t_a = max(F_a / (N · P_attn · η_attn), K / (N · BW · η_mem))
    scale-up    t_x = x_tok · T / (N · BW_link)         (NVLink inside a node, RDMA across)
                      MoE dispatch / combine, overlapped with compute (two-batch overlap);
                      a dense model's TP all-reduces are serial instead (where the chip has an
                      allreduce_efficiency): t_x = 2(N-1)/N · x_tok · T / (BW_link · η_ar)
    latency     L   = layers · (collectives · t_coll + t_floor)   (t_coll per topology: intra /
                      inter; t_floor a fixed time per layer per step: kernel launches and
                      syncs, per MoE or dense layer, plus a dense step's context-phase floor
                      when it carries prefill)

    t = max(t_g + t_a, t_x) + L + t_overhead        (dense TP: t_g + t_a + t_x + L + ...)

Attention runs in BF16 whatever the weights are (FlashAttention / FlashMLA compute in BF16);
GEMMs run at their own dtype (FP8 weights: FP8 peak; INT4 weight-only: dequantised to BF16).
The bandwidth part of the MoE dispatch/combine overlaps with compute (two-batch overlap);
the per-collective latency floor does not. ``t_overhead`` is the scheduler's per-step host
cost. Topology comes from the instance: ``N ≤ chips_per_node`` is one node (NVLink), more is
cross-node (RDMA).

Consequences the benchmark relies on:

* a small decode batch is memory- and latency-bound; MLA decode at long context turns
  attention-compute-bound on a chip with little BF16 compute (H20);
* extending ``k`` tokens costs about one decode step plus the extra attention and experts;
* chunked prefill pays the weight read, latency and overhead per step, so a small last
  chunk that is not packed with other work costs nearly a full step (the bathtub's dips);
* KV capacity of an instance is its HBM minus weights (dense replicated per chip when
  attention is data-parallel) minus a reserve, in tokens.

The ``zero-compute`` hardware profile makes every term zero: a step costs ``t_overhead``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from pddbench.errors import UserError
from pddbench.servers.profiles import HardwareProfile, ModelProfile


@dataclass(frozen=True)
class Machine:
    """One serving instance as the cost model sees it."""

    hardware: HardwareProfile
    chips: int
    model: ModelProfile
    step_overhead_s: float = 0.0005
    attention_dp: bool = False  # data-parallel attention: each chip holds all dense weights
    attention_dtype: str = "bf16"  # FlashAttention / FlashMLA compute dtype (FP8 attention: "fp8")
    kv_read_factor: float = 1.0  # times a decode / extend step reads each cached KV byte

    def __post_init__(self) -> None:
        if self.chips < 1:
            raise UserError(f"an instance needs at least one chip, got {self.chips}")

    @property
    def cross_node(self) -> bool:
        return self.chips > self.hardware.chips_per_node

    @property
    def collective_latency_s(self) -> float:
        """Latency of one small-message collective across this instance's chips."""
        if self.chips <= 1:
            return 0.0
        hw = self.hardware
        return hw.collective_latency_inter_s if self.cross_node else hw.collective_latency_intra_s

    @property
    def link_bytes_per_s(self) -> float:
        """Per-chip bandwidth of the scale-up traffic (NVLink in a node, the NIC across)."""
        hw = self.hardware
        return hw.rdma_bytes_per_s if self.cross_node else hw.interconnect_bytes_per_s

    @property
    def dense_copies(self) -> int:
        """How many copies of the dense weights the chips hold (and read each step)."""
        return self.chips if self.attention_dp else 1

    @property
    def resident_weight_bytes(self) -> float:
        md = self.model
        return md.dense_weight_bytes * self.dense_copies + md.expert_weight_bytes

    @cached_property
    def rates(self) -> Rates:
        """The constants :func:`step_cost` reads, worked out once per machine."""
        return Rates.of(self)


@dataclass(frozen=True, slots=True)
class Rates:
    """One machine's per-step constants (each the same expression :func:`step_cost` used to
    evaluate per step, so the prices are the same to the last bit)."""

    moe: bool
    eff_p: float  # GEMM efficiency, prefill tokens
    eff_d: float  # ... decode and extend tokens
    two_active: float  # 2 * active parameters (FLOPs per token per GEMM pass)
    attn_pair: float  # attention FLOPs per (query, key) pair, prefill form
    decode_attn_pair: float  # ... decode / absorbed form
    dense_bytes: float  # dense weights read per step (all copies)
    expert_bytes: float
    expert_miss: float  # 1 - k/E: the chance a token leaves one expert untouched
    kv_bytes: int  # per token
    kv_read: float
    mem_rate: float  # achieved HBM bytes/s over the chips
    gemm_rate: float  # the GEMM dtype's peak over the chips
    attn_rate: float  # achieved attention FLOP/s over the chips
    comm_per_token: float  # scale-up bytes per token (0 on one chip)
    dense_allreduce: bool  # a dense model's serial TP all-reduces
    link_rate: float  # scale-up bytes/s over the chips (MoE dispatch / combine)
    latency_decode: float  # per-step latency floor of a step without prefill
    latency_prefill: float  # ... with prefill
    overhead: float

    @staticmethod
    def of(m: Machine) -> Rates:
        md, hw, n = m.model, m.hardware, m.chips
        moe = md.experts > 0
        eff_p, eff_d = hw.gemm_efficiencies(moe=moe)

        def latency(prefill: bool) -> float:
            floor = hw.layer_floor(moe=moe, prefill=prefill)
            return md.layers * (md.collectives_per_layer * m.collective_latency_s + floor)

        return Rates(
            moe=moe,
            eff_p=eff_p,
            eff_d=eff_d,
            two_active=2.0 * md.active_params,
            attn_pair=md.attn_flops_per_pair,
            decode_attn_pair=md.decode_attn_flops_per_pair,
            dense_bytes=md.dense_weight_bytes * m.dense_copies,
            expert_bytes=md.expert_weight_bytes,
            expert_miss=1.0 - md.experts_per_token / md.experts if moe else 1.0,
            kv_bytes=md.kv_bytes_per_token,
            kv_read=m.kv_read_factor,
            mem_rate=n * hw.hbm_bytes_per_s * hw.memory_efficiency,
            gemm_rate=n * hw.peak_flops(md.gemm_dtype),
            attn_rate=n * hw.attention_flops(m.attention_dtype),
            comm_per_token=md.comm_bytes_per_token if n > 1 else 0.0,
            dense_allreduce=md.experts <= 0 and hw.allreduce_efficiency > 0,
            link_rate=n * m.link_bytes_per_s,
            latency_decode=latency(False),
            latency_prefill=latency(True),
            overhead=m.step_overhead_s,
        )


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


@dataclass(slots=True)  # not frozen: one per engine step, and frozen costs ~6x to build
class StepCost:
    seconds: float
    flops: float
    hbm_bytes: float
    comm_bytes: float
    bound: str  # "compute" | "memory" | "attention" | "interconnect" | "overhead"
    gemm_s: float = 0.0
    attention_s: float = 0.0
    comm_s: float = 0.0
    latency_s: float = 0.0


def _div(x: float, rate: float) -> float:
    if x <= 0:
        return 0.0
    return 0.0 if math.isinf(rate) else x / rate


def weights_touched_bytes(m: Machine, tokens: int) -> float:
    """HBM bytes of weights one step of ``tokens`` tokens reads (see the module docstring)."""
    r = m.rates
    if not r.moe or tokens <= 0:
        return r.dense_bytes + r.expert_bytes
    return r.dense_bytes + r.expert_bytes * (1.0 - r.expert_miss**tokens)


def step_cost(m: Machine, shape: StepShape) -> StepCost:
    """Price one forward pass (formulas in the module docstring)."""
    return price(m, shape.prefill, shape.extend, shape.decode_batch, shape.decode_context)


def segment_sums(new: int, context: int, count: int = 1) -> tuple[int, int]:
    """(query, key) pairs and KV tokens of ``count`` segments of ``new`` tokens each, over
    ``context`` tokens already there in all: ``Σ n (c + (n + 1) / 2)`` and ``Σ (c + n)``,
    as whole numbers."""
    return new * context + count * (new * (new + 1) // 2), context + count * new


def price(
    m: Machine,
    prefill: Sequence[tuple[int, int]],
    extend: Sequence[tuple[int, int]],
    decode_batch: int,
    decode_context: int,
) -> StepCost:
    """:func:`step_cost` of the step shaped ``prefill``, ``extend``, ``decode_batch``,
    ``decode_context`` (:class:`StepShape`'s fields), without building the shape."""
    t_prefill = pairs_p = kv_prefill = 0
    t_extend = pairs_d = kv_decode = 0
    for tok, c in prefill:
        pairs, kv = segment_sums(tok, c)
        pairs_p += pairs
        kv_prefill += kv
        t_prefill += tok
    for k, c in extend:
        pairs, kv = segment_sums(k, c)
        pairs_d += pairs
        kv_decode += kv
        t_extend += k
    sums = (t_prefill, pairs_p, kv_prefill, t_extend, pairs_d, kv_decode)
    return price_sums(m, *sums, decode_batch, decode_context)


def price_sums(
    m: Machine,
    t_prefill: int,
    pairs_p: int,
    kv_prefill: int,
    t_extend: int,
    pairs_d: int,
    kv_decode: int,
    decode_batch: int,
    decode_context: int,
) -> StepCost:
    """:func:`price` from the step's sums (a scheduler that adds them up as it batches):
    prefill tokens, their (query, key) pairs ``Σ n (c + (n + 1) / 2)`` and KV
    ``Σ (c + n)``; the same three of the extend segments; the decode batch and its summed
    context. The sums are whole numbers (``n (n + 1) / 2`` is), so adding them as integers
    gives, to the last bit, the floats the per-chunk sums give."""
    pairs_p_f = float(pairs_p)
    pairs_d_f = float(decode_context + pairs_d)
    kv_prefill_f = float(kv_prefill)
    kv_decode_f = float(decode_context + kv_decode)
    t = t_prefill + t_extend + decode_batch
    if t <= 0:
        return StepCost(0.0, 0.0, 0.0, 0.0, "overhead")
    r = m.rates
    f_gemm = r.two_active * t
    f_gemm_eff = r.two_active * (t_prefill / r.eff_p + (t - t_prefill) / r.eff_d)
    f_attn = r.attn_pair * pairs_p_f + r.decode_attn_pair * pairs_d_f
    if r.moe:  # weights_touched_bytes(m, t), inline (t > 0 here)
        w = r.dense_bytes + r.expert_bytes * (1.0 - r.expert_miss**t)
    else:
        w = r.dense_bytes + r.expert_bytes
    kv = r.kv_bytes * (kv_prefill_f + kv_decode_f * r.kv_read)
    mem_rate = r.mem_rate  # x / rate as _div does it (finite x over an inf rate is 0)
    g_compute = f_gemm_eff / r.gemm_rate if f_gemm_eff > 0 else 0.0
    g_memory = w / mem_rate if w > 0 else 0.0
    a_compute = f_attn / r.attn_rate if f_attn > 0 else 0.0
    a_memory = kv / mem_rate if kv > 0 else 0.0
    t_gemm = g_compute if g_compute > g_memory else g_memory
    t_attn = a_compute if a_compute > a_memory else a_memory
    comm = r.comm_per_token * t
    compute = t_gemm + t_attn
    if r.dense_allreduce:
        # a dense model's tensor-parallel all-reduces sit between its GEMMs: a ring moves
        # 2(N-1)/N of each message per chip, at the link's achieved bus bandwidth
        n, hw = m.chips, m.hardware
        t_comm = _div(comm * 2.0 * (n - 1) / n, m.link_bytes_per_s * hw.allreduce_efficiency)
        body = compute + t_comm
    else:
        t_comm = comm / r.link_rate if comm > 0 else 0.0  # _div (an inf rate gives 0)
        body = compute if compute > t_comm else t_comm
    latency = r.latency_prefill if t_prefill > 0 else r.latency_decode
    if body <= 0:
        bound = "overhead"
    elif t_comm > compute:
        bound = "interconnect"
    elif t_attn > t_gemm:
        bound = "attention" if a_compute >= a_memory else "memory"
    else:
        bound = "compute" if g_compute >= g_memory else "memory"
    # seconds, flops, hbm_bytes, comm_bytes, bound, gemm_s, attention_s, comm_s, latency_s
    return StepCost(
        body + latency + r.overhead, f_gemm + f_attn, w + kv, comm, bound, t_gemm, t_attn,
        t_comm, latency,
    )  # fmt: skip


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


def kv_copy_seconds(m: Machine, tokens: int, block_size: int) -> float:
    """GPU ↔ host staging of ``tokens`` tokens of paged KV on one side of a KV handoff.

    The KV of a request lies in ``block_size``-token pages per layer; a transfer engine that
    ships it over TCP gathers each (layer, page) piece with its own copy call into pinned
    host memory: ``layers · pages`` calls of ``copy_call_latency`` plus the bytes at the
    host link's rate. Zero on the zero-compute profile.
    """
    if tokens <= 0:
        return 0.0
    hw, md = m.hardware, m.model
    pages = math.ceil(tokens / block_size)
    calls = md.layers * pages
    return calls * hw.copy_call_latency_s + _div(
        md.kv_bytes_per_token * tokens, hw.host_copy_bytes_per_s
    )


def kv_capacity_tokens(m: Machine, reserve_fraction: float = 0.1) -> int:
    """KV tokens an instance can hold: HBM minus resident weights minus a reserve."""
    hbm = m.hardware.hbm_bytes * m.chips
    weights = m.resident_weight_bytes
    free = hbm * (1.0 - reserve_fraction) - weights
    if free <= 0:
        raise UserError(
            f"{m.model.name} weights ({weights / 1e9:.0f} GB on {m.chips} chips) do not fit "
            f"in {m.chips} x {m.hardware.name} ({hbm / 1e9:.0f} GB HBM, "
            f"{reserve_fraction:.0%} reserved); use more chips per instance"
        )
    return int(free // m.model.kv_bytes_per_token)
