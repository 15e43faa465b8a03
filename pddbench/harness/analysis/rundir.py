"""Reading a run folder: ``results/<run>/`` as written by the replay.

Owns the checks of a run folder's records — and only reading it (the file names are
``harness.rundir.folder``'s, the manifest is ``RunManifest``'s):

    <run>/requests.parquet        one row per request (harness.rundir.records.RECORDS_SCHEMA)
    <run>/manifest.json           harness.rundir.manifest.RunManifest
    <run>/server_metrics.parquet  optional
    <run>/links.parquet           optional (netem.probe.LinkProbe rows)
    <run>/capacity.json           optional (analysis.capacity.CapacityCurve)
    <run>/main_verdict.json       optional (harness.rundir.main_verdict.MainVerdict)

Only ``request_id``, ``session_id``, ``status`` and ``intended_send_s`` are required in
``requests.parquet``; other missing columns read as null. Every problem is one
:class:`~pddbench.errors.UserError` line naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from pddbench.errors import UNKNOWN_RUN_KEY, UserError, first_problem
from pddbench.harness.analysis.capacity import CapacityCurve, curve_from_verdict
from pddbench.harness.analysis.recordset import (
    CATEGORY_COLUMNS,
    NUMERIC_COLUMNS,
    TOKEN_TIMES,
    RecordSet,
)
from pddbench.harness.config.cost import CostModel
from pddbench.harness.config.sla import SLA, sla_from_mapping
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.ladder import LadderVerdict, read_verdict
from pddbench.harness.rundir.main_verdict import MainVerdict, read_main_verdict
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.harness.rundir.records import REQUIRED_COLUMNS, latency_columns


@dataclass
class RunData:
    """One run folder, loaded."""

    path: Path
    manifest: RunManifest
    records: RecordSet
    links: pa.Table | None = None
    server_metrics: pa.Table | None = None
    capacity: CapacityCurve | None = None
    ladder: LadderVerdict | None = None  # the capacity verdict, when the file holds one
    main_verdict: MainVerdict | None = None  # the main job's verdict, when it reported here

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def scenario_name(self) -> str:
        return self.manifest.scenario_name

    def sla(self) -> SLA | None:
        """The scenario's SLA, or None when it declares none (absent or empty)."""
        return scenario_sla(self.manifest, RunPaths(self.path).manifest)

    def cost(self) -> CostModel | None:
        """The scenario's cost model, or None when it declares none (absent or empty)."""
        return self.manifest.scenario.cost


def scenario_sla(manifest: RunManifest, where: Path) -> SLA | None:
    """The SLA declared in a manifest's scenario (None when absent or an empty table)."""
    data = manifest.scenario.sla or None
    if data is None:
        return None
    return sla_from_mapping(data, where=str(where), unknown=UNKNOWN_RUN_KEY)


def read_manifest(folder: Path) -> RunManifest:
    """The run's manifest (:meth:`RunManifest.load`: one error line naming the file)."""
    return RunManifest.load(folder)


def read_records(path: Path, *, token_times: bool = True) -> RecordSet:
    """``requests.parquet`` as a :class:`RecordSet` (only the columns the analysis uses)."""
    if not path.is_file():
        run = path.parent
        if RunPaths(run).journal.is_file():  # the harness died before it finalised
            raise UserError(
                f"{path}: missing: the run was not finalised (killed?); `pddbench finalize "
                f"{run}` writes it from the run's journal.jsonl, or `pddbench replay --resume "
                f"{run}` sends the rest and finalises"
            )
        raise UserError(f"{path}: missing")
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{path}: not a parquet file: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
    wanted = set(NUMERIC_COLUMNS + CATEGORY_COLUMNS)
    if token_times:
        wanted.add(TOKEN_TIMES)
    columns = [c for c in schema.names if c in wanted]
    try:
        table = pq.read_table(path, columns=columns)
        records = RecordSet.from_arrow(table)
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{path}: cannot read records: {exc}") from None
    check_latencies(records, path)
    return records


_LATENCIES = latency_columns()


def check_latencies(records: RecordSet, path: Path) -> None:
    """Refuse records the metrics would silently drop: a negative TTFT, a negative
    latency of an ok request, or an ok request without a TTFT or an end-to-end time (no
    harness writes any of these)."""
    ok = records.ok
    for column in _LATENCIES:
        if column not in records.num:
            continue
        values = records.num[column]
        with np.errstate(invalid="ignore"):
            negative = np.flatnonzero((values < 0) & (ok | (column == "ttft_s")))
        if negative.size:
            i = int(negative[0])
            raise UserError(f"{path}: row {i}: {column} {values[i]:g} is negative")
        if column != "tpot_s":  # TPOT is undefined below two tokens
            missing = np.flatnonzero(ok & ~np.isfinite(values))
            if missing.size:
                raise UserError(
                    f"{path}: row {int(missing[0])}: {column} is missing for an ok request"
                )


def _optional_table(path: Path) -> pa.Table | None:
    if not path.is_file():
        return None
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise UserError(f"{path}: not a parquet file: {exc}") from None


def read_capacity(path: Path) -> CapacityCurve:
    """A capacity file: a ladder verdict (``basis`` present) or an older curve."""
    verdict = read_verdict(path)
    if verdict is not None:
        return curve_from_verdict(verdict)
    return _read_model(path, CapacityCurve)


_M = TypeVar("_M", bound=BaseModel)


def _read_model(path: Path, model: type[_M], text: str | None = None) -> _M:
    try:
        return model.model_validate_json(
            text if text is not None else path.read_text(encoding="utf-8")
        )
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except ValidationError as exc:
        loc, msg = first_problem(exc, unknown=UNKNOWN_RUN_KEY)
        raise UserError(f"{path}: {loc}: {msg}") from None


def load_run(folder: str | Path, *, token_times: bool = True) -> RunData:
    """Load a run folder (:class:`UserError` on anything missing or malformed)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such run folder")
    paths = RunPaths(folder)
    manifest = RunManifest.load(folder)
    records = read_records(paths.requests, token_times=token_times)
    has_capacity = paths.capacity.is_file()
    capacity = read_capacity(paths.capacity) if has_capacity else None
    ladder = read_verdict(paths.capacity) if has_capacity else None
    return RunData(
        path=folder,
        manifest=manifest,
        records=records,
        links=_optional_table(paths.links),
        server_metrics=_optional_table(paths.server_metrics),
        capacity=capacity,
        ladder=ladder,
        main_verdict=read_main_verdict(paths.main_verdict),
    )


def common_main_verdict(runs: Sequence[RunData]) -> MainVerdict | None:
    """The main job's verdict the run folders carry (it saves one copy into each folder it
    reports over); None when none does, :class:`UserError` when two folders disagree."""
    found = [(r.path, r.main_verdict) for r in runs if r.main_verdict is not None]
    for path, verdict in found[1:]:
        if verdict != found[0][1]:
            raise UserError(
                f"{RunPaths(path).main_verdict} differs from {RunPaths(found[0][0]).main_verdict}:"
                " these run folders come from different main jobs; report one job's folders"
            )
    return found[0][1] if found else None
