"""Fits the compute model's efficiencies and floors to the FIT points of
profiles/calibration.toml only (test points are never read: ``table(split="fit")``) and
prints the fitted values, to be copied into profiles/hardware.toml.

    .venv/bin/python bench/fit_calibration.py

Objective: a robust (soft-L1) loss on log(model / measured) over the fit rows, so that one
fit row far off the others (an old software version) does not drag every parameter; solved
by coordinate descent on a multiplicative grid.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pddbench.servers import profiles
from pddbench.servers.calibration import summarise, table

SM90 = ("h800-sxm", "h100-sxm", "h200-sxm")
# (parameter, hardware profiles sharing it, lower, upper)
PARAMS: list[tuple[str, tuple[str, ...], float, float]] = [
    ("gemm_efficiency", SM90, 0.1, 1.0),
    ("decode_gemm_efficiency", SM90, 0.05, 1.0),
    ("dense_gemm_efficiency", SM90, 0.1, 1.0),
    ("dense_decode_gemm_efficiency", SM90, 0.05, 1.0),
    ("gemm_efficiency", ("h20",), 0.1, 1.0),
    ("decode_gemm_efficiency", ("h20",), 0.05, 1.0),
    ("layer_floor_s", (*SM90, "h20"), 0.0, 500e-6),
    ("dense_layer_floor_s", (*SM90, "a100-sxm-80gb"), 0.0, 500e-6),
    ("host_step_s", (*SM90, "h20"), 0.0, 10e-3),
    ("dense_gemm_efficiency", ("a100-sxm-80gb",), 0.1, 1.0),
    ("dense_prefill_layer_floor_s", (*SM90, "a100-sxm-80gb"), 0.0, 500e-6),
    ("gqa_reread_share", SM90, 0.0, 1.0),
    ("allreduce_efficiency", (*SM90, "a100-sxm-80gb"), 0.05, 1.0),
]
SCALE = 0.1  # soft-L1 knee in log units (~10 %)


def _overrides(values: list[float]) -> dict[str, profiles.HardwareProfile]:
    out = {}
    for (name, hws, _, _), v in zip(PARAMS, values, strict=True):
        for hw in hws:
            base = out.get(hw) or profiles.hardware(hw)
            out[hw] = replace(base, **{name: v})
    return out


def loss(values: list[float]) -> float:
    total = 0.0
    for r in table(_overrides(values), split="fit"):
        x = math.log(r.ratio) / SCALE
        total += 2.0 * (math.sqrt(1.0 + x * x) - 1.0)
    return total


def main() -> int:
    start = []
    for name, hws, lo, _ in PARAMS:
        v = getattr(profiles.hardware(hws[0]), name)
        start.append(v if v > 0 else max(lo, 1e-6) * 2)
    values = list(start)
    best = loss(values)
    for step in (1.5, 1.2, 1.07, 1.02):
        improved = True
        while improved:
            improved = False
            for i, (_, _, lo, hi) in enumerate(PARAMS):
                for f in (step, 1 / step):
                    trial = list(values)
                    trial[i] = min(hi, max(lo, (values[i] or 1e-6) * f))
                    t = loss(trial)
                    if t < best - 1e-9:
                        values, best, improved = trial, t, True
    for (name, hws, _, _), v in zip(PARAMS, values, strict=True):
        print(f"{name:30} {','.join(hws):40} {v:.4g}")
    s = summarise(table(_overrides(values), split="fit"), "fit")
    print(
        f"fit: {s.rows} rows, median |error| {s.median_abs_error:.1%}, "
        f"{s.within_band_share:.0%} within band, loss {best:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
