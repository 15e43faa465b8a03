"""Builders of run folders and nightly histories for the analysis tests.

Run folders are written directly with pyarrow in ``RECORDS_SCHEMA``: either from
hand-written rows (``write_rows``) for exact metric checks, or from the synthetic
generator (``pddbench.harness.analysis.synthetic``) for realistic multi-system runs.
Histories scale the TTFT of one base run by a per-run noise factor, so a planted change
is known exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pddbench.harness.analysis.synthetic import SynthRun, manifest_for, synth_table
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.harness.rundir.records import RECORDS_SCHEMA

DEFAULTS: dict[str, Any] = {
    "parent_request_id": None,
    "chunks": 0,
    "input_tokens": 0,
    "output_tokens": 0,
    "expected_output_tokens": 0,
    "client_queue_s": 0.0,
    "status": "ok",
}


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """A records table from partial rows (missing fields null / defaulted)."""
    cols = {}
    for f in RECORDS_SCHEMA:
        cols[f.name] = [r.get(f.name, DEFAULTS.get(f.name)) for r in rows]
    return pa.table(cols, schema=RECORDS_SCHEMA)


def write_table(folder: Path, table: pa.Table, manifest: RunManifest) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, RunPaths(folder).requests)
    manifest.save(folder)
    return folder


def manifest(run_id: str, scenario: str = "pdd", **scenario_fields: Any) -> RunManifest:
    return RunManifest(
        run_id=run_id,
        scenario={"name": scenario, **scenario_fields},
        trace={"name": "hand"},
        started_at="2026-03-01T00:00:00Z",
        ended_at="2026-03-01T00:01:00Z",
        duration_s=60.0,
        links=[],
    )


def write_rows(folder: Path, rows: list[dict[str, Any]], **manifest_fields: Any) -> Path:
    return write_table(folder, rows_table(rows), manifest(folder.name, **manifest_fields))


def write_synth(folder: Path, spec: SynthRun) -> Path:
    table = synth_table(spec)
    m = manifest_for(spec, table)
    m.run_id = folder.name
    return write_table(folder, table, m)


def scale_ttft(table: pa.Table, factor: float) -> pa.Table:
    """``table`` with every TTFT multiplied by ``factor`` (later timestamps shifted)."""
    ttft = table.column("ttft_s")
    delta = pc.multiply(ttft, factor - 1.0).fill_null(0.0)
    out = table
    for name in ("ttft_s", "first_token_s", "last_token_s", "end_s", "e2e_s"):
        i = out.schema.get_field_index(name)
        out = out.set_column(i, name, pc.add(out.column(name), delta))
    return out


def write_history(
    root: Path,
    *,
    nights: int = 20,
    repeats: int = 3,
    noise: float = 0.03,
    seed: int = 0,
    plant: float = 1.0,
    plant_from: int | None = None,
    requests: int = 1500,
    scenario: str = "pdd",
) -> tuple[Path, list[Path]]:
    """A history ``root/<date>/<run>`` of ``nights`` nights, plus tonight's runs.

    Every run is the same base run with all TTFTs scaled by ``exp(N(0, noise))`` (so the
    TTFT percentiles carry ``noise`` relative noise per run); nights from ``plant_from``
    (index; ``None`` = tonight only) and tonight are further scaled by ``plant``.
    Returns (history folder, tonight's run folders) — tonight lives outside the history.
    """
    rng = np.random.default_rng(seed)
    base = synth_table(SynthRun(system=scenario, requests=requests, seed=seed))
    m = manifest_for(SynthRun(system=scenario, seed=seed), base)
    hist = root / "history"

    def one(folder: Path, factor: float) -> Path:
        mm = m.model_copy(update={"run_id": f"{folder.parent.name}-{folder.name}"})
        return write_table(folder, scale_ttft(base, factor), mm)

    for night in range(nights):
        date = f"2026-03-{night + 1:02d}"
        planted = plant if plant_from is not None and night >= plant_from else 1.0
        for r in range(repeats):
            one(hist / date / f"{scenario}-r{r}", planted * float(np.exp(rng.normal(0, noise))))
    tonight = [
        one(root / "tonight" / f"{scenario}-r{r}", plant * float(np.exp(rng.normal(0, noise))))
        for r in range(repeats)
    ]
    return hist, tonight
