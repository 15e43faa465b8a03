"""Prints the compute model's calibration: every public measured serving point with its
split (fit / test), the measured figure, the model's prediction for the same setup and the
ratio of speeds (> 1: the model is too fast), then per split the median |error|, the share
within ±30 % and the worst five rows with their setups.

    .venv/bin/python bench/bench_calibration.py [--split fit|test]

Test rows never set a parameter (profiles/calibration.toml; docs/calibration.md).
"""

from __future__ import annotations

import argparse
import sys

from pddbench.servers.calibration import BAND, Row, summarise, table

UNITS = {"tokens_per_s": "tok/s", "tpot_ms": "ms TPOT", "ttft_ms": "ms TTFT"}


def _row(r: Row) -> str:
    p = r.point
    unit = UNITS[p.metric] + (f"/{p.per}" if p.metric == "tokens_per_s" else "")
    flag = "" if r.within_band else "  OUT"
    return (
        f"{p.split:4} {p.id:30} {p.measured:9.1f} {r.model_value:9.1f} {unit:18} "
        f"{r.ratio:5.2f} {r.step.bound:11}{flag}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", choices=("fit", "test"), default=None)
    args = ap.parse_args(argv)
    rows = table()
    shown = [r for r in rows if args.split in (None, r.point.split)]
    print(f"{'split':4} {'point':30} {'measured':>9} {'model':>9} {'unit':18} {'ratio':>5} bound")
    for r in shown:
        print(_row(r))
    lo, hi = BAND
    print()
    for split in ("fit", "test"):
        s = summarise(rows, split)
        print(
            f"{split}: {s.rows} rows, median |error| {s.median_abs_error:.1%}, "
            f"{s.within_band_share:.0%} within {lo}-{hi}"
        )
        for r in s.worst:
            print(f"   worst {r.ratio:5.2f}  {r.point.id}: {r.point.setup}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
