"""The compute model's capacity bound of a deployment, per role, and the role that binds.

Owns the bound arithmetic the sizing search prunes with (and ``bench/bench_model_bounds.py``
prints): for each instance, the requests per second it could serve if nothing but the
modelled GPU time (and, for decoders, the KV room) counted; for a WAN between P and the
decoders, the requests per second the line carries the KV of. MODEL ONLY: no queueing, no
cache misses beyond the workload's mean, no handoffs; the capacity itself is measured (the
twin, the emulated run). Sans-IO: a deployment, a network and a :class:`Workload` in,
:class:`RoleBound` out.

Decoders run at the SLA's TPOT with the deployment's speculative decoding: the largest batch
whose verify step, per token emitted, stays within it, and within the instance's KV room.
The relay (RLD) decodes a small share of the output tokens (``RLD_TOKEN_SHARE``: MD : RLD
~ 15 : 1, PDD.md); its bound is its decode rate over that share.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pddbench.errors import UserError
from pddbench.servers import profiles
from pddbench.servers.compute import (
    Machine,
    StepShape,
    kv_capacity_tokens,
    prefill_seconds,
    step_cost,
)
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role

RLD_TOKEN_SHARE = 0.06  # share of output tokens the relay decodes (PDD.md: MD : RLD ~ 15 : 1)

# the resources a bound can name (the report's "binding resource")
PREFILL = "prefill"
DECODE_TPOT = "decode TPOT"
DECODE_KV = "decode KV room"
RELAY = "relay decode"
WAN = "WAN"
MEMORY = "memory"


@dataclass(frozen=True)
class Workload:
    """The per-request means the bounds price: context (prompt) tokens, uncached tokens
    (P's misses: what P computes and, with a decode-side cache, what crosses to D), output
    tokens."""

    context: int
    uncached: int
    output: int

    @classmethod
    def of(cls, input_tokens: np.ndarray, hit_rate: np.ndarray, output: np.ndarray) -> Workload:
        """The means of a set of requests (hit rates as fractions; NaN counts as a miss)."""
        inp = np.asarray(input_tokens, dtype=np.float64)
        hit = np.nan_to_num(np.asarray(hit_rate, dtype=np.float64), nan=0.0)
        if inp.size == 0:
            raise ValueError("a workload needs at least one request")
        return cls(
            context=max(1, round(float(inp.mean()))),
            uncached=max(1, round(float((inp * (1.0 - hit)).mean()))),
            output=max(1, round(float(np.asarray(output, dtype=np.float64).mean()))),
        )

    def text(self) -> str:
        return (
            f"context {self.context:,} tokens, uncached {self.uncached:,}, output {self.output:,}"
        )


@dataclass(frozen=True)
class Decoding:
    """How decoders run: the TPOT they must hold and the speculative decoding they use."""

    tpot_s: float
    draft_tokens: int = 1
    acceptance: float = 0.0
    chunk_tokens: int = 8192
    max_batch: int = 256  # the scheduler's batch cap
    step_overhead_s: float = 0.0005  # the scheduler's, per step (the servers' Machine)
    hbm_reserve_fraction: float = 0.1  # the scheduler's HBM reserve (the servers' KV room)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a verify step emits (consecutive acceptance)."""
        a, k = self.acceptance, self.draft_tokens
        return sum(a**i for i in range(k))


@dataclass(frozen=True)
class RoleBound:
    """One role's bound: its instances, what they serve together, what limits them."""

    role: str
    instances: int
    chips: int  # per instance
    req_per_s: float
    resource: str  # what limits this role (one of the module's resource names)
    detail: str


@functools.lru_cache(maxsize=4096)
def _machine(
    hardware: str, chips: int, model: str, dtype: str, dp: bool, step_overhead_s: float = 0.0005
) -> Machine:
    """The instance as the servers build it (``DeploymentConfig.machine``'s fields)."""
    return Machine(
        profiles.hardware(hardware),
        chips,
        profiles.model(model),
        step_overhead_s=step_overhead_s,
        attention_dp=dp,
        attention_dtype=dtype,
    )


def kv_room(m: Machine, reserve_fraction: float = 0.1) -> int:
    """KV tokens the instance holds beside its weights (the compute model's rule), 0 when
    the weights do not fit."""
    try:
        return kv_capacity_tokens(m, reserve_fraction)
    except UserError:
        return 0


def holds_weights(hardware: str, chips: int, model: str, dtype: str = "bf16") -> bool:
    """Whether ``chips`` of ``hardware`` hold the model's weights with KV room left."""
    return kv_room(_machine(hardware, chips, model, dtype, False)) > 0


@functools.lru_cache(maxsize=4096)
def prefill_rps(m: Machine, w: Workload, chunk_tokens: int) -> tuple[float, str]:
    """Prompts per second one prefill instance computes at the workload's mean."""
    s = prefill_seconds(m, w.uncached, w.context - w.uncached, chunk_tokens)
    return 1.0 / s, f"{s * 1e3:.0f} ms per prompt"


@functools.lru_cache(maxsize=4096)
def decode_rps(m: Machine, w: Workload, d: Decoding) -> tuple[float, str, str]:
    """Requests per second one decoder finishes at the TPOT target: (rate, resource, detail)."""
    tokens = kv_room(m, d.hbm_reserve_fraction)
    if tokens <= 0:
        return 0.0, MEMORY, "the weights do not fit"
    room = min(d.max_batch, tokens // max(1, w.context + w.output))
    per_step = d.tokens_per_step
    best, step = 0, 0.0
    lo, hi = 1, int(room)
    while lo <= hi:  # the verify step grows with the batch: the largest within the TPOT
        mid = (lo + hi) // 2
        t = _verify(m, mid, w.context, d.draft_tokens)
        if t / per_step <= d.tpot_s:
            best, step, lo = mid, t, mid + 1
        else:
            hi = mid - 1
    if best == 0:
        if room == 0:
            return 0.0, DECODE_KV, "no KV room for one request"
        return 0.0, DECODE_TPOT, "TPOT target not met even at batch 1"
    resource = DECODE_KV if best == room else DECODE_TPOT
    why = "KV room" if best == room else "TPOT"
    rps = best * per_step / step / w.output
    return rps, resource, f"batch {best} ({why}), {step * 1e3:.1f} ms verify step"


def _verify(m: Machine, batch: int, context: int, draft: int) -> float:
    """One verify step: every sequence extends by its drafts on top of its context."""
    return step_cost(m, StepShape(extend=((draft, context),) * batch)).seconds


def _kind(role: Role) -> str | None:
    if role == Role.PREFILL:
        return "P"
    if role in (Role.DECODE, Role.MAIN_DECODE):
        return "D"
    if role == Role.RELAY_DECODE:
        return "RLD"
    if role == Role.COLOCATED:
        return "C"
    return None


@dataclass(frozen=True)
class Group:
    """Instances of one role, alike: what the bounds read of them."""

    role: Role
    hardware: str
    datacenter: str
    instances: int
    chips: int  # per instance
    attention_dtype: str = "bf16"
    attention_dp: bool = False
    prefix_cache: bool = True


def groups_of(dep: DeploymentConfig) -> list[Group]:
    """A deployment's instances as groups (one per role and chip count, in order)."""
    out: dict[tuple[Role, int], list[InstanceConfig]] = {}
    for inst in dep.instances:
        if _kind(inst.role) is not None:
            out.setdefault((inst.role, inst.chips), []).append(inst)
    return [
        Group(
            role=i[0].role,
            hardware=i[0].hardware,
            datacenter=i[0].datacenter,
            instances=len(i),
            chips=i[0].chips,
            attention_dtype=i[0].attention_dtype,
            attention_dp=i[0].attention_dp,
            prefix_cache=i[0].prefix_cache,
        )
        for i in out.values()
    ]


def deployment_bounds(
    dep: DeploymentConfig,
    w: Workload,
    d: Decoding,
    wan_mbit: dict[tuple[str, str], float] | None = None,
) -> list[RoleBound]:
    """Every role's bound (and the WAN's, where P and the decoders sit apart: ``wan_mbit``
    maps a (site, site) pair to its line rate in Mbit/s)."""
    return role_bounds(dep.model, groups_of(dep), w, d, wan_mbit or {})


def role_bounds(
    model: str,
    groups: Sequence[Group],
    w: Workload,
    d: Decoding,
    wan_mbit: dict[tuple[str, str], float],
) -> list[RoleBound]:
    """:func:`deployment_bounds` of instance groups (a role may span groups)."""
    by_role: dict[str, RoleBound] = {}
    for g in groups:
        kind = _kind(g.role)
        m = _machine(
            g.hardware, g.chips, model, g.attention_dtype, g.attention_dp, d.step_overhead_s
        )
        if kind == "P":
            rps, detail = prefill_rps(m, w, d.chunk_tokens)
            resource = PREFILL
        else:
            rps, resource, detail = decode_rps(m, w, d)
            if kind == "RLD":
                rps, resource = rps / RLD_TOKEN_SHARE, RELAY
            elif kind == "C":  # a colocated instance prefills too: the slower of the two
                p_rps, _ = prefill_rps(m, w, d.chunk_tokens)
                if p_rps < rps:
                    rps, resource = p_rps, PREFILL
        had = by_role.get(g.role.value)
        total = rps * g.instances + (had.req_per_s if had else 0.0)
        count = g.instances + (had.instances if had else 0)
        by_role[g.role.value] = RoleBound(g.role.value, count, g.chips, total, resource, detail)
    out = list(by_role.values())
    wan = _wan_bound(model, groups, w, wan_mbit)
    if wan is not None:
        out.append(wan)
    return out


def _wan_bound(
    model: str, groups: Sequence[Group], w: Workload, wan_mbit: dict[tuple[str, str], float]
) -> RoleBound | None:
    """The line's bound: its rate over the KV bytes a request sends across it (the
    uncached tokens where the far decoders keep a prefix cache, else the whole context)."""
    prefill_sites = {g.datacenter for g in groups if g.role == Role.PREFILL}
    far = [
        g
        for g in groups
        if g.role in (Role.DECODE, Role.MAIN_DECODE) and g.datacenter not in prefill_sites
    ]
    if not far or not prefill_sites:
        return None
    site = far[0].datacenter
    rates = [
        r
        for (a, b), r in wan_mbit.items()
        if (a in prefill_sites and b == site) or (b in prefill_sites and a == site)
    ]
    if not rates:
        return None
    crossing = w.uncached if all(g.prefix_cache for g in far) else w.context
    per_request = crossing * profiles.model(model).kv_bytes_per_token
    rps = min(rates) * 1e6 / 8 / per_request
    what = "uncached" if crossing == w.uncached else "whole-context"
    return RoleBound("wan", 1, 0, rps, WAN, f"{per_request / 1e9:.2f} GB of {what} KV per request")


def binding(bounds: Sequence[RoleBound]) -> RoleBound:
    """The bound that binds: the smallest."""
    return min(bounds, key=lambda b: (b.req_per_s, b.role))


def capacity_bound(bounds: Sequence[RoleBound]) -> float:
    return binding(bounds).req_per_s if bounds else math.nan
