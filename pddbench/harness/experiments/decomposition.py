"""The TTFT decomposition of one run folder, as the reproduction report's table.

Owns reading a reference-server run's records and manifest, decomposing every ok
request's TTFT (:mod:`pddbench.harness.analysis.ttft_parts`), and summarising the parts
by pipeline and published hit-rate bin, with how closely the parts add up to TTFT. The
parts are derived from the records' ``server_timing`` column at report time; they are
not (yet) columns of the records themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from pddbench.harness.analysis.recordset import HIT_BIN_LABELS, UNKNOWN, RecordSet
from pddbench.harness.analysis.ttft_parts import (
    PARTS,
    ClockJoin,
    PartsSummary,
    decompose_rows,
    summarise,
)
from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.rundir.manifest import RunManifest

COLUMNS = ("status", "actual_send_s", "first_token_s", "ttft_s", "server_timing")


@dataclass(frozen=True)
class RunDecomposition:
    summary: list[PartsSummary]
    ok: int
    decomposed: int
    max_sum_error_s: float  # max |sum of parts - TTFT| over decomposed requests


def decompose_run(folder: Path) -> RunDecomposition | None:
    """None when the folder has no records or its records carry no server story."""
    path = folder / "requests.parquet"
    if not path.exists():
        return None
    table = pq.read_table(path)
    if "server_timing" not in table.column_names:
        return None
    manifest = RunManifest.load(folder)
    rows = table.select([c for c in COLUMNS if c in table.column_names]).to_pylist()
    parts = decompose_rows(rows, ClockJoin.of_manifest(manifest))
    rs = RecordSet.from_arrow(table)
    bins = [HIT_BIN_LABELS[b] if b >= 0 else UNKNOWN for b in rs.hit_bin]
    pipelines = [str(p) for p in rs.cat["pipeline"].values()]
    ttft = [float(r["ttft_s"]) if r.get("ttft_s") is not None else math.nan for r in rows]
    errors = [
        abs(p.total() - t) for p, t in zip(parts, ttft, strict=True) if math.isfinite(p.total())
    ]
    return RunDecomposition(
        summary=summarise(parts, pipelines, bins, ttft),
        ok=sum(r.get("status") == "ok" for r in rows),
        decomposed=len(errors),
        max_sum_error_s=max(errors, default=math.nan),
    )


def decomposition_table(label: str, d: RunDecomposition) -> Table:
    rows = tuple(
        (
            TCell(s.pipeline),
            TCell(s.hit_bin),
            TCell(str(s.requests)),
            TCell(f"{s.ttft_mean_s * 1e3:.1f}"),
            *(TCell(f"{s.parts_mean_s[k] * 1e3:.1f}") for k in PARTS),
        )
        for s in d.summary
    )
    err = f"{d.max_sum_error_s * 1e3:.3f} ms" if math.isfinite(d.max_sum_error_s) else "n/a"
    return Table(
        title=f"TTFT decomposition: {label} (mean ms by pipeline and hit bin)",
        headers=("pipeline", "hit bin", "n", "TTFT", *PARTS),
        rows=rows,
        numeric_from=2,
        note=f"{d.decomposed} of {d.ok} ok requests decomposed from the servers' story; "
        f"parts add up to TTFT within {err} (largest difference)",
    )
