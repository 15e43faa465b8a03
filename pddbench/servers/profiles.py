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
    interconnect_bytes_per_s: float
    compute_efficiency: float
    memory_efficiency: float
    collective_latency_s: float
    sources: tuple[str, ...]

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
    weight_bytes_per_param: float
    compute_dtype: str
    attn_flops_per_pair: float
    decode_attn_flops_per_pair: float
    comm_bytes_per_token: float
    collectives_per_layer: int
    vocab_size: int
    max_context: int
    sources: tuple[str, ...]

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param

    @property
    def active_fraction(self) -> float:
        """Share of the weights one token touches (1.0 for a dense model)."""
        return min(1.0, self.active_params / self.total_params)


def _positive(table: str, key: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise UserError(f"profile {table}: {key} must be a positive number, got {value!r}")
    return float(value)


def _non_negative(table: str, key: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
        raise UserError(f"profile {table}: {key} must be a number >= 0, got {value!r}")
    return float(value)


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
            compute_efficiency=_positive(name, "compute_efficiency", t.get("compute_efficiency")),
            memory_efficiency=_positive(name, "memory_efficiency", t.get("memory_efficiency")),
            collective_latency_s=_non_negative(
                name, "collective_latency_us", t.get("collective_latency_us", 0.0)
            )
            * 1e-6,
            sources=tuple(str(s) for s in t.get("sources", [])),  # type: ignore[union-attr]
        )
    return out


@cache
def model_profiles() -> dict[str, ModelProfile]:
    out: dict[str, ModelProfile] = {}
    for name, t in _load("models.toml").items():
        attn = _positive(name, "attn_flops_per_pair", t.get("attn_flops_per_pair"))
        dtype = str(t.get("compute_dtype", "bf16"))
        if dtype not in ("fp8", "bf16"):
            raise UserError(f"profile {name}: compute_dtype must be fp8 or bf16, got {dtype!r}")
        out[name] = ModelProfile(
            name=name,
            description=str(t.get("description", "")),
            total_params=_positive(name, "total_params", t.get("total_params")),
            active_params=_positive(name, "active_params", t.get("active_params")),
            layers=int(_positive(name, "layers", t.get("layers"))),
            kv_bytes_per_token=int(
                _positive(name, "kv_bytes_per_token", t.get("kv_bytes_per_token"))
            ),
            weight_bytes_per_param=_positive(
                name, "weight_bytes_per_param", t.get("weight_bytes_per_param")
            ),
            compute_dtype=dtype,
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
