"""The TTFT decomposition of one run folder, as the reproduction report's table.

Owns reading a reference-server run's records and manifest, decomposing every ok
request's TTFT (:mod:`pddbench.harness.analysis.ttft_parts`), and summarising the parts
by pipeline and published hit-rate bin, with how closely the parts add up to TTFT. The
parts are the records' ``ttft_<part>_s`` columns (the client decomposes each request as
it settles); runs recorded before those columns existed are decomposed from their
``server_timing`` column with the manifest's clock.
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
    from_record,
    summarise,
)
from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.rundir.manifest import RunManifest


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
    rows = table.to_pylist()
    if f"ttft_{PARTS[0]}_s" in table.column_names:  # recorded by the client (record columns)
        parts = [from_record(r) for r in rows]
    else:  # older runs: derive from the story with the manifest's clock
        parts = decompose_rows(rows, ClockJoin.of_manifest(RunManifest.load(folder)))
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
