"""The comparison printed at the end of ``pddbench replay`` (one row per run).

Reads each run's ``requests.parquet`` and manifest and prints a plain table: requests,
errors, TTFT P50/P90/P99, TPOT P50, E2E P99 and completed requests per second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import click
import numpy as np
import pyarrow.parquet as pq

from pddbench.harness.rundir import RunPaths


def _pct(values: np.ndarray, q: float) -> float:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if values.size else math.nan


def run_row(paths: RunPaths) -> dict[str, object]:
    """The headline figures of one run."""
    manifest = json.loads(paths.manifest.read_text()) if paths.manifest.exists() else {}
    name = str((manifest.get("scenario") or {}).get("name", paths.run_id))
    df = pq.read_table(paths.requests).to_pandas() if paths.requests.exists() else None
    if df is None or df.empty:
        return {"system": name, "requests": 0, "errors": 0}
    ok = df[df.status == "ok"]
    ttft = ok.ttft_s.to_numpy(dtype=float)
    span = float(df.end_s.max() - df.intended_send_s.min()) if len(df) else math.nan
    return {
        "system": name,
        "requests": len(df),
        "errors": int((df.status != "ok").sum()),
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "tpot_p50_ms": _pct(ok.tpot_s.to_numpy(dtype=float), 50) * 1000,
        "e2e_p99_s": _pct(ok.e2e_s.to_numpy(dtype=float), 99),
        "rps": len(ok) / span if span and span > 0 else math.nan,
        "run": str(paths.root),
    }


def format_table(rows: Sequence[dict[str, object]]) -> str:
    cols = [
        "system",
        "requests",
        "errors",
        "ttft_p50_s",
        "ttft_p90_s",
        "ttft_p99_s",
        "tpot_p50_ms",
        "e2e_p99_s",
        "rps",
    ]

    def cell(v: object) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.3f}"
        return "-" if v is None else str(v)

    table = [cols] + [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    lines = [
        "  ".join(
            v.rjust(w) if i else v.ljust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]
    return "\n".join(lines)


def print_comparison(runs: Sequence[RunPaths]) -> None:
    rows = [run_row(p) for p in runs]
    if not rows:
        return
    click.echo(format_table(rows))
    for r in rows:
        click.echo(f"  {r['system']}: {r.get('run', '')}")
