"""Prints the compute model's capacity bound of each built-in reference system: per role, the
requests per second its instances could serve if nothing but the modelled GPU time counted,
the binding role, and capacity per unit of cost (a model-only BCR) relative to same-dc-pd.

    .venv/bin/python bench/bench_model_bounds.py [--all-bf16] [--uncached N] [--context N]
        [--output N]

MODEL ONLY, NOT A MEASUREMENT: no queueing, no cache misses beyond the stated mean,
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

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.sizing.bounds import Workload, binding, deployment_bounds
from pddbench.harness.sizing.rank import wan_rates
from pddbench.harness.sizing.search import decoding

SYSTEMS = ("same-dc-pd", "cross-dc-pd", "cross-dc-pd-drc", "pdd")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--all-bf16", action="store_true")
    ap.add_argument("--uncached", type=int, default=7100)
    ap.add_argument("--context", type=int, default=64990)
    ap.add_argument("--output", type=int, default=253)
    a = ap.parse_args(argv)
    w = Workload(a.context, a.uncached, a.output)
    print("MODEL ONLY (compute model, no queueing / handoffs): requests/s per role")
    ref = 0.0
    for system in SYSTEMS:
        scenario = load_scenario(system)
        dep = scenario.deployment_config
        if a.all_bf16:
            dep = dep.model_copy(
                update={
                    "instances": [
                        i.model_copy(update={"attention_dtype": "bf16"}) for i in dep.instances
                    ]
                }
            )
        d = decoding(scenario, scenario.full_sla())  # the SLA's TPOT, the deployment's MTP
        rows = deployment_bounds(dep, w, d, wan_rates(scenario))
        cost = scenario.cost_model.total if scenario.cost_model else float("nan")
        bind = binding(rows)
        bcr = bind.req_per_s / cost
        ref = ref or bcr
        print(
            f"{system:16} bound {bind.req_per_s:6.2f} req/s, binding {bind.role} "
            f"({bind.resource}), cost {cost:5.1f}, capacity/cost x{bcr / ref:.2f} of same-dc-pd"
        )
        for r in rows:
            print(f"   {r.role:13} x{r.instances}: {r.req_per_s:7.2f} req/s ({r.detail})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
