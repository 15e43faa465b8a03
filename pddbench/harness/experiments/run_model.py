"""Experiments priced from the compute model: E2 (bathtub, dips, revenue) and E7 (handoff).

Owns sweeping :mod:`~pddbench.harness.experiments.compute_model` into measurements:

* E2 — uncached prompt tokens computed per second by a saturated prefill instance
  (16 x H800, 8192-token chunks, no cross-sequence packing: a small last chunk is a step
  of its own) for 64K-token prompts at each prefix hit rate, and the revenue per second
  of the same when cached tokens are billed at 10 % and 25 % of the uncached price
  (PDD.md's range): ``uncached/s * (1 + c * h / (1 - h))``;
* E7 — the model-priced handoff (labelled so: WAN queueing is not modelled).
"""

from __future__ import annotations

from pddbench.harness.experiments.compute_model import (
    prefill_machine,
    price_handoff,
    uncached_per_s,
)
from pddbench.harness.experiments.model import Experiment, Measurement, RunContext, Series, Value

CACHED_PRICES = (0.10, 0.25)
PROMPT = 65536


def run_e2(exp: Experiment, ctx: RunContext) -> Measurement:
    m = prefill_machine()
    prompts = 4 if ctx.quick else 16
    hits = [h / 100 for h in range(0, 99)]
    ys = []
    for i, h in enumerate(hits):
        if i % 10 == 0:
            ctx.progress(f"E2: hit {h:.0%} ({i}/{len(hits)})")
        ys.append(uncached_per_s(m, [PROMPT] * prompts, h, packing=False))
    served = [u / (1 - h) for u, h in zip(ys, hits, strict=True)]
    series = [
        Series(
            label="uncached tokens/s", x=hits, y=ys, x_name="prefix hit rate", y_name="tokens/s"
        ),
        Series(
            label="prompt tokens served/s",
            x=hits,
            y=served,
            x_name="prefix hit rate",
            y_name="tokens/s",
        ),
    ]
    for c in CACHED_PRICES:
        series.append(
            Series(
                label=f"revenue, cached at {c:.0%}",
                x=hits,
                y=[u * (1 + c * h / (1 - h)) for u, h in zip(ys, hits, strict=True)],
                x_name="prefix hit rate",
                y_name="uncached-token equivalents/s",
            )
        )
    values = [
        Value(name="uncached_tokens_per_s_at_0", value=ys[0], unit="tokens/s"),
        Value(name="uncached_tokens_per_s_min", value=min(ys), unit="tokens/s"),
    ]
    return exp.measured(
        ctx,
        values,
        series=series,
        labels=["compute model (16 x H800 prefill, no packing)"],
        notes=[f"{prompts} prompts of {PROMPT} tokens per point"],
    )


def run_e7_model(exp: Experiment, ctx: RunContext) -> Measurement:
    p = price_handoff()
    values = [
        Value(name="kv_bytes", value=p.kv_bytes, unit="B"),
        Value(name="kv_mean_ms", value=p.kv_mean_s * 1e3, unit="ms"),
        Value(name="kv_max_ms", value=p.kv_max_s * 1e3, unit="ms"),
        Value(name="kv_copy_ms", value=(p.kv_copy_rld_s + p.kv_copy_md_s) * 1e3, unit="ms"),
        Value(name="ed_bytes", value=p.ed_bytes, unit="B"),
        Value(name="ed_mean_ms", value=p.ed_mean_s * 1e3, unit="ms"),
        Value(name="ed_max_ms", value=p.ed_max_s * 1e3, unit="ms"),
    ]
    return exp.measured(
        ctx,
        values,
        wan_emulated=False,
        labels=["model-priced (bench_handoff_model logic): WAN queueing not modelled"],
        notes=["MD 16 x H20 decoding 32 sequences at 36K tokens; WAN 10 Gbit/s, 15 ms, ±3 ms"],
    )
