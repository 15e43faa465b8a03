"""Hardware and model profiles: the data the compute model prices a forward pass with.

Owns loading and validating ``profiles/hardware.toml`` and ``profiles/models.toml`` (package
data, each entry with its sources) into frozen dataclasses. Pure data: no cost formulas
(see :mod:`pddbench.servers.compute`) and no I/O beyond reading those two files once.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pddbench.errors import UserError


@dataclass(frozen=True)
class HardwareProfile:
    """One chip kind (per-chip figures; an instance multiplies by its chip count)."""

    name: str
    description: str
    peak_flops_bf16: float  # FLOP/s, dense
    peak_flops_fp8: float  # FLOP/s, dense
    hbm_bytes: float
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float  # NVLink, per chip
    rdma_bytes_per_s: float  # scale-out NIC, per chip
    chips_per_node: int
    gemm_efficiency: float  # achieved share of the GEMM dtype's peak, prefill (large GEMMs)
    decode_gemm_efficiency: float  # ... decode / extend steps (small per-expert GEMMs)
    attention_efficiency: float  # achieved share of the BF16 peak (compute-bound attention)
    memory_efficiency: float  # achieved share of HBM bandwidth (weight and KV streaming)
    collective_latency_intra_s: float  # one small-message collective inside a node
    collective_latency_inter_s: float  # ... across nodes
    host_copy_bytes_per_s: float  # GPU <-> pinned host memory (PCIe), per transfer
    copy_call_latency_s: float  # one copy call (launch + DMA setup)
    sources: tuple[str, ...]
    host_step_s: float = 0.0  # CPU time per step a non-overlapping scheduler leaves exposed
    dense_gemm_efficiency: float = 0.0  # share of peak, dense-model prefill GEMMs (0: as MoE)
    dense_decode_gemm_efficiency: float = 0.0  # ... dense-model decode GEMMs (0: as MoE)
    layer_floor_s: float = 0.0  # fixed time per MoE layer per step (kernel launches, syncs)
    dense_layer_floor_s: float = 0.0  # ... per layer of a dense model (fewer, larger kernels)
    attention_fp8_speedup: float = 2.0  # FP8 attention kernels over BF16 ones (compute-bound)
    dense_prefill_layer_floor_s: float = 0.0  # per dense layer of a step that carries prefill
    gqa_reread_share: float = 1.0  # share of a GQA group's repeated KV loads that miss L2
    allreduce_efficiency: float = 0.0  # dense TP all-reduce bus bandwidth / link (0: overlapped)

    def gemm_efficiencies(self, moe: bool) -> tuple[float, float]:
        """(prefill, decode) GEMM efficiency of a MoE or a dense model on this chip."""
        if moe or not self.dense_gemm_efficiency:
            return self.gemm_efficiency, self.decode_gemm_efficiency
        return self.dense_gemm_efficiency, self.dense_decode_gemm_efficiency or (
            self.decode_gemm_efficiency
        )

    def layer_floor(self, moe: bool, prefill: bool = False) -> float:
        """Fixed time per layer of a step (a dense step carrying prefill adds its own)."""
        if moe:
            return self.layer_floor_s
        return self.dense_layer_floor_s + (self.dense_prefill_layer_floor_s if prefill else 0.0)

    def attention_flops(self, dtype: str) -> float:
        """Achieved FLOP/s of compute-bound attention kernels at ``dtype`` (BF16 or FP8)."""
        rate = self.peak_flops_bf16 * self.attention_efficiency
        return rate * self.attention_fp8_speedup if dtype == "fp8" else rate

    def peak_flops(self, dtype: str) -> float:
        return self.peak_flops_fp8 if dtype == "fp8" else self.peak_flops_bf16


@dataclass(frozen=True)
class ModelProfile:
    """One served model, as far as cost and KV size are concerned."""

    name: str
    description: str
    total_params: float
    active_params: float
    layers: int
    kv_bytes_per_token: int
    dense_params: float  # always-read weights (attention, shared experts, dense layers, head)
    experts: int  # routed experts per MoE layer (0: dense model)
    experts_per_token: int
    dense_weight_bytes_per_param: float
    expert_weight_bytes_per_param: float
    gemm_dtype: str  # "fp8" or "bf16": the peak the GEMMs run at
    attn_flops_per_pair: float
    decode_attn_flops_per_pair: float
    comm_bytes_per_token: float
    collectives_per_layer: int
    vocab_size: int
    max_context: int
    sources: tuple[str, ...]
    query_heads_per_kv_head: int = 1  # GQA group width (1: MHA, or MLA's shared latent)

    @property
    def expert_params(self) -> float:
        return max(0.0, self.total_params - self.dense_params)

    @property
    def dense_weight_bytes(self) -> float:
        return self.dense_params * self.dense_weight_bytes_per_param

    @property
    def expert_weight_bytes(self) -> float:
        return self.expert_params * self.expert_weight_bytes_per_param

    @property
    def weight_bytes(self) -> float:
        """All weights, stored once."""
        return self.dense_weight_bytes + self.expert_weight_bytes


def _positive(table: str, key: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise UserError(f"profile {table}: {key} must be a positive number, got {value!r}")
    return float(value)


def _non_negative(table: str, key: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
        raise UserError(f"profile {table}: {key} must be a number >= 0, got {value!r}")
    return float(value)


def _fraction(table: str, key: str, value: object) -> float:
    v = _positive(table, key, value)
    if v > 1:
        raise UserError(f"profile {table}: {key} is a share of peak, at most 1, got {value!r}")
    return v


def _share(table: str, key: str, value: object) -> float:
    v = _non_negative(table, key, value)
    if v > 1:
        raise UserError(f"profile {table}: {key} is a share, at most 1, got {value!r}")
    return v


def _optional_fraction(table: str, key: str, t: dict[str, object]) -> float:
    return _fraction(table, key, t[key]) if key in t else 0.0


def _dtype(table: str, key: str, value: object) -> str:
    dtype = str(value)
    if dtype not in ("fp8", "bf16"):
        raise UserError(f"profile {table}: {key} must be fp8 or bf16, got {dtype!r}")
    return dtype


def _load(filename: str) -> dict[str, dict[str, object]]:
    text = resources.files("pddbench.servers").joinpath("profiles", filename).read_text("utf-8")
    return tomllib.loads(text)


@cache
def hardware_profiles() -> dict[str, HardwareProfile]:
    out: dict[str, HardwareProfile] = {}
    for name, t in _load("hardware.toml").items():
        out[name] = HardwareProfile(
            name=name,
            description=str(t.get("description", "")),
            peak_flops_bf16=_positive(name, "peak_tflops_bf16", t.get("peak_tflops_bf16")) * 1e12,
            peak_flops_fp8=_positive(name, "peak_tflops_fp8", t.get("peak_tflops_fp8")) * 1e12,
            hbm_bytes=_positive(name, "hbm_gb", t.get("hbm_gb")) * 1e9,
            hbm_bytes_per_s=_positive(name, "hbm_tb_s", t.get("hbm_tb_s")) * 1e12,
            interconnect_bytes_per_s=_positive(
                name, "interconnect_gb_s", t.get("interconnect_gb_s")
            )
            * 1e9,
            rdma_bytes_per_s=_positive(name, "rdma_gb_s", t.get("rdma_gb_s")) * 1e9,
            chips_per_node=int(_positive(name, "chips_per_node", t.get("chips_per_node", 8))),
            gemm_efficiency=_fraction(name, "gemm_efficiency", t.get("gemm_efficiency")),
            decode_gemm_efficiency=_fraction(
                name, "decode_gemm_efficiency", t.get("decode_gemm_efficiency")
            ),
            attention_efficiency=_fraction(
                name, "attention_efficiency", t.get("attention_efficiency")
            ),
            memory_efficiency=_fraction(name, "memory_efficiency", t.get("memory_efficiency")),
            collective_latency_intra_s=_non_negative(
                name, "collective_latency_intra_us", t.get("collective_latency_intra_us", 0.0)
            )
            * 1e-6,
            collective_latency_inter_s=_non_negative(
                name, "collective_latency_inter_us", t.get("collective_latency_inter_us", 0.0)
            )
            * 1e-6,
            host_copy_bytes_per_s=_positive(name, "host_copy_gb_s", t.get("host_copy_gb_s")) * 1e9,
            copy_call_latency_s=_non_negative(
                name, "copy_call_latency_us", t.get("copy_call_latency_us", 0.0)
            )
            * 1e-6,
            sources=tuple(str(s) for s in t.get("sources", [])),  # type: ignore[union-attr]
            host_step_s=_non_negative(name, "host_step_us", t.get("host_step_us", 0.0)) * 1e-6,
            dense_gemm_efficiency=_optional_fraction(name, "dense_gemm_efficiency", t),
            dense_decode_gemm_efficiency=_optional_fraction(
                name, "dense_decode_gemm_efficiency", t
            ),
            layer_floor_s=_non_negative(name, "layer_floor_us", t.get("layer_floor_us", 0.0))
            * 1e-6,
            dense_layer_floor_s=_non_negative(
                name, "dense_layer_floor_us", t.get("dense_layer_floor_us", 0.0)
            )
            * 1e-6,
            attention_fp8_speedup=_positive(
                name, "attention_fp8_speedup", t.get("attention_fp8_speedup", 2.0)
            ),
            dense_prefill_layer_floor_s=_non_negative(
                name, "dense_prefill_layer_floor_us", t.get("dense_prefill_layer_floor_us", 0.0)
            )
            * 1e-6,
            gqa_reread_share=_share(name, "gqa_reread_share", t.get("gqa_reread_share", 1.0)),
            allreduce_efficiency=_optional_fraction(name, "allreduce_efficiency", t),
        )
    return out


@cache
def model_profiles() -> dict[str, ModelProfile]:
    out: dict[str, ModelProfile] = {}
    for name, t in _load("models.toml").items():
        attn = _positive(name, "attn_flops_per_pair", t.get("attn_flops_per_pair"))
        total = _positive(name, "total_params", t.get("total_params"))
        experts = int(_non_negative(name, "experts", t.get("experts", 0)))
        dense = _positive(name, "dense_params", t.get("dense_params", total))
        if dense > total or (experts == 0 and dense != total):
            raise UserError(
                f"profile {name}: dense_params must equal total_params for a dense model and "
                "not exceed it for a MoE"
            )
        wbpp = t.get("weight_bytes_per_param")
        out[name] = ModelProfile(
            name=name,
            description=str(t.get("description", "")),
            total_params=total,
            active_params=_positive(name, "active_params", t.get("active_params")),
            layers=int(_positive(name, "layers", t.get("layers"))),
            kv_bytes_per_token=int(
                _positive(name, "kv_bytes_per_token", t.get("kv_bytes_per_token"))
            ),
            dense_params=dense,
            experts=experts,
            experts_per_token=int(
                _non_negative(name, "experts_per_token", t.get("experts_per_token", 0))
            ),
            dense_weight_bytes_per_param=_positive(
                name, "dense_weight_bytes_per_param", t.get("dense_weight_bytes_per_param", wbpp)
            ),
            expert_weight_bytes_per_param=_positive(
                name,
                "expert_weight_bytes_per_param",
                t.get("expert_weight_bytes_per_param", wbpp),
            ),
            gemm_dtype=_dtype(name, "gemm_dtype", t.get("gemm_dtype", "bf16")),
            attn_flops_per_pair=attn,
            decode_attn_flops_per_pair=_positive(
                name, "decode_attn_flops_per_pair", t.get("decode_attn_flops_per_pair", attn)
            ),
            comm_bytes_per_token=_positive(
                name, "comm_bytes_per_token", t.get("comm_bytes_per_token")
            ),
            collectives_per_layer=int(
                _non_negative(name, "collectives_per_layer", t.get("collectives_per_layer", 0))
            ),
            vocab_size=int(_positive(name, "vocab_size", t.get("vocab_size"))),
            max_context=int(_positive(name, "max_context", t.get("max_context"))),
            sources=tuple(str(s) for s in t.get("sources", [])),  # type: ignore[union-attr]
            query_heads_per_kv_head=int(
                _positive(name, "query_heads_per_kv_head", t.get("query_heads_per_kv_head", 1))
            ),
        )
    return out


def hardware(name: str) -> HardwareProfile:
    profiles = hardware_profiles()
    if name not in profiles:
        raise UserError(f"unknown hardware profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]


def model(name: str) -> ModelProfile:
    profiles = model_profiles()
    if name not in profiles:
        raise UserError(f"unknown model profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]


def is_zero_compute(hw: HardwareProfile) -> bool:
    return math.isinf(hw.peak_flops_bf16) and math.isinf(hw.hbm_bytes_per_s)
