"""Prints the compute model's capacity bound of each built-in reference system: per role, the
requests per second its instances could serve if nothing but the modelled GPU time counted,
the binding role, and capacity per unit of cost (a model-only BCR) relative to same-dc-pd.

    .venv/bin/python bench/bench_model_bounds.py [--all-bf16] [--uncached N] [--context N]
        [--output N]

MODEL ONLY, NOT A MEASUREMENT: no queueing, no WAN, no cache misses beyond the stated mean,
no handoffs; the measured capacity is `pddbench capacity` on the emulated deployment. The
workload defaults are the jan-feb profile's means (`pddbench trace synth --profile jan-feb`:
input 65.0K tokens, output 253) with 7,100 uncached tokens per request (README: ~0.33 GB of
uncached KV per request at 46,490 bytes per token, measured on the busiest hour). Decode runs
at the default SLA's TPOT (30 ms) with the built-ins' MTP (2 tokens verified, 1.85 emitted):
the largest batch whose verify step stays within it, and within the instance's KV room.
``--all-bf16`` prices every instance with BF16 attention (the model before issue 28).
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from importlib import resources

from pddbench.servers import profiles
from pddbench.servers.compute import (
    Machine,
    StepShape,
    kv_capacity_tokens,
    prefill_seconds,
    step_cost,
)

SYSTEMS = ("same-dc-pd", "cross-dc-pd", "cross-dc-pd-drc", "pdd")
TPOT_S = 0.030
DRAFT, ACCEPT = 2, 1.85
CHUNK = 8192
ROLE_KIND = {"prefill": "P", "decode": "D", "main-decode": "D", "relay-decode": "RLD"}


@dataclass(frozen=True)
class RoleBound:
    role: str
    instances: int
    req_per_s: float
    detail: str


def _machine(inst: dict[str, object], model: str, all_bf16: bool) -> Machine:
    dtype = "bf16" if all_bf16 else str(inst.get("attention_dtype", "bf16"))
    return Machine(
        profiles.hardware(str(inst["hardware"])),
        int(inst["chips"]),  # type: ignore[call-overload]
        profiles.model(model),
        attention_dtype=dtype,
    )


def prefill_rps(m: Machine, uncached: int, cached: int) -> tuple[float, str]:
    s = prefill_seconds(m, uncached, cached, CHUNK)
    return 1.0 / s, f"{s * 1e3:.0f} ms per prompt"


def decode_rps(m: Machine, context: int, output: int) -> tuple[float, str]:
    room = kv_capacity_tokens(m) // context
    best, step = 0, 0.0
    for b in range(1, int(room) + 1):
        t = _verify(m, b, context)
        if t / ACCEPT > TPOT_S:
            break
        best, step = b, t
    if best == 0:
        return 0.0, "TPOT SLA not met even at batch 1"
    why = "KV room" if best == room else "TPOT"
    return best * ACCEPT / step / output, f"batch {best} ({why}), {step * 1e3:.1f} ms verify step"


def _verify(m: Machine, batch: int, context: int) -> float:
    """One MTP verify step: every sequence extends by the drafts on top of its context."""
    shape = StepShape(extend=((DRAFT, context),) * batch)
    return step_cost(m, shape).seconds


def bounds(
    system: str, uncached: int, context: int, output: int, all_bf16: bool
) -> list[RoleBound]:
    text = resources.files("pddbench.scenarios").joinpath(f"{system}.toml").read_text("utf-8")
    dep = tomllib.loads(text)["deployment"]
    model = str(dep.get("model", "pdd-flagship-1t"))
    out: dict[str, list[tuple[float, str]]] = {}
    for inst in dep["instances"]:
        kind = ROLE_KIND.get(str(inst["role"]))
        if kind is None or kind == "RLD":  # RLD decodes ~6 % of the tokens (PDD.md): not priced
            continue
        m = _machine(inst, model, all_bf16)
        if kind == "P":
            r = prefill_rps(m, uncached, context - uncached)
        else:
            r = decode_rps(m, context, output)
        out.setdefault(kind, []).append(r)
    return [RoleBound(k, len(v), sum(x for x, _ in v), v[0][1]) for k, v in sorted(out.items())]


def cost(system: str) -> float:
    text = resources.files("pddbench.scenarios").joinpath(f"{system}.toml").read_text("utf-8")
    raw = tomllib.loads(text)
    prices = raw["cost"]["unit_price"]
    total = sum(
        prices[i["hardware"]] * i["chips"]
        for i in raw["deployment"]["instances"]
        if "hardware" in i
    )
    return total + float(raw["cost"].get("line_cost", 0.0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all-bf16", action="store_true")
    ap.add_argument("--uncached", type=int, default=7100)
    ap.add_argument("--context", type=int, default=64990)
    ap.add_argument("--output", type=int, default=253)
    a = ap.parse_args(argv)
    print("MODEL ONLY (compute model, no queueing / WAN / handoffs): requests/s per role")
    ref = 0.0
    for system in SYSTEMS:
        rows = bounds(system, a.uncached, a.context, a.output, a.all_bf16)
        cap = min(r.req_per_s for r in rows)
        binding = min(rows, key=lambda r: r.req_per_s).role
        bcr = cap / cost(system)
        ref = ref or bcr
        print(
            f"{system:16} bound {cap:6.2f} req/s, binding {binding}, cost {cost(system):5.1f}, "
            f"capacity/cost x{bcr / ref:.2f} of same-dc-pd"
        )
        for r in rows:
            print(f"   {r.role:3} x{r.instances}: {r.req_per_s:6.2f} req/s ({r.detail})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
