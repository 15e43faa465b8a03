"""Prints the compute model's calibration table: each public measured serving point, its
source, the measured throughput, the model's prediction for the same setup, and the ratio.

    .venv/bin/python bench/bench_calibration.py

Every ratio should lie within 0.7-1.3; a row outside names its reason (docs/calibration.md).
Exits 1 when a row without a reason falls outside the band.
"""

from __future__ import annotations

import sys

from pddbench.servers.calibration import BAND, table


def main() -> int:
    rows = table()
    bad = 0
    print(f"{'point':28} {'measured':>9} {'model':>9} {'ratio':>6}  bound        source")
    for r in rows:
        p = r.point
        unit = "tok/s/node" if p.per == "node" else "tok/s/GPU"
        flag = " (fitted)" if p.fitted else ""
        note = ""
        if not r.within_band:
            note = f"  REASON: {p.reason}" if p.reason else "  OUT OF BAND, no reason"
            bad += not p.reason
        print(
            f"{p.id:28} {p.measured_tokens_per_s:9.0f} {r.model_tokens_per_s:9.0f} "
            f"{r.ratio:6.2f}  {r.step.bound:12} {p.url.split(' ;')[0]}{flag}{note}"
        )
        print(f"{'':28}   {unit}; quoted: {p.quote[:110]}")
    lo, hi = BAND
    inside = sum(r.within_band for r in rows)
    print(f"\n{inside}/{len(rows)} rows within {lo}-{hi}; fitted rows set an efficiency")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
