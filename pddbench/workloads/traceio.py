"""Reading and writing canonical trace files (parquet with pddbench metadata).

Owns the file boundary: building a canonical table from column arrays, writing it with
its format/version metadata, and reading it back — turning every failure (missing file,
not parquet, truncated, wrong columns, invalid rows) into a :class:`TraceError` whose
``details`` carry one line per problem. Validation rules live in ``validate``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.errors import TraceError
from pddbench.workloads.schema import (
    META_EPOCH,
    META_SOURCE,
    META_VERSION,
    TRACE_SCHEMA,
    TRACE_VERSION,
    Col,
    trace_metadata,
)


@dataclass
class Trace:
    """A canonical trace in memory: the Arrow table plus its file metadata."""

    table: pa.Table
    epoch: str | None = None
    source: dict[str, object] = field(default_factory=dict)
    path: str | None = None

    @property
    def num_requests(self) -> int:
        return self.table.num_rows

    def column(self, name: str) -> np.ndarray:
        """A non-list column as a numpy array (nulls become NaN / None)."""
        return self.table.column(name).to_numpy(zero_copy_only=False)


def hashes_from_flat(offsets: np.ndarray, values: np.ndarray) -> pa.ListArray:
    """A ``list<uint64>`` array from CSR-style offsets (len n+1) and flat hash values."""
    return pa.ListArray.from_arrays(
        pa.array(np.asarray(offsets, dtype=np.int32)),
        pa.array(np.asarray(values, dtype=np.uint64), type=pa.uint64()),
    )


def build_table(
    *,
    request_id: Sequence[str] | pa.Array,
    session_id: Sequence[str] | pa.Array,
    turn_index: Sequence[int] | np.ndarray,
    arrival_s: Sequence[float] | np.ndarray,
    input_length: Sequence[int] | np.ndarray,
    output_length: Sequence[int] | np.ndarray,
    block_size: int | Sequence[int] | np.ndarray,
    block_hashes: pa.Array | Sequence[Sequence[int]],
    parent_request_id: Sequence[str | None] | pa.Array | None = None,
    think_time_s: Sequence[float | None] | np.ndarray | None = None,
    agent_type: Sequence[str | None] | pa.Array | None = None,
    parent_session_id: Sequence[str | None] | pa.Array | None = None,
) -> pa.Table:
    """Assemble a canonical trace table from columns (optional ones default to nulls)."""
    n = len(request_id)
    if np.isscalar(block_size):
        block_size = np.full(n, int(block_size), dtype=np.int32)  # type: ignore[arg-type]

    def col(name: str, values: object) -> pa.Array:
        typ = TRACE_SCHEMA.field(name).type
        if values is None:
            return pa.nulls(n, type=typ)
        if isinstance(values, pa.ChunkedArray | pa.Array):
            return values.cast(typ) if values.type != typ else values
        return pa.array(values, type=typ)

    arrays = [
        col(Col.REQUEST_ID, request_id),
        col(Col.SESSION_ID, session_id),
        col(Col.PARENT_REQUEST_ID, parent_request_id),
        col(Col.TURN_INDEX, turn_index),
        col(Col.ARRIVAL, arrival_s),
        col(Col.INPUT_LENGTH, input_length),
        col(Col.OUTPUT_LENGTH, output_length),
        col(Col.BLOCK_SIZE, block_size),
        col(Col.BLOCK_HASHES, block_hashes),
        col(Col.THINK_TIME, think_time_s),
        col(Col.AGENT_TYPE, agent_type),
        col(Col.PARENT_SESSION_ID, parent_session_id),
    ]
    return pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA)


def write_trace(
    table: pa.Table,
    path: str | Path,
    *,
    source: dict[str, object] | None = None,
    epoch: str | None = None,
) -> Path:
    """Write ``table`` (canonical schema) to ``path`` as parquet with format metadata."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    table = table.cast(TRACE_SCHEMA) if table.schema != TRACE_SCHEMA else table
    meta = trace_metadata(source=json.dumps(source or {}, sort_keys=True), epoch=epoch)
    table = table.replace_schema_metadata(meta)
    tmp = path.with_name(path.name + ".partial")
    pq.write_table(table, tmp, compression="zstd", row_group_size=256 * 1024)
    tmp.replace(path)
    return path


def _read_parquet(path: Path) -> pa.Table:
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, expected a trace parquet file")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(
            f"{path}: not a readable parquet trace ({first_line})",
            details=[f"{path}: not a readable parquet trace ({first_line})"],
        ) from None


def _check_epoch(path: Path, epoch: str) -> None:
    """The epoch must be an ISO-8601 date-time that arrivals can be added to."""
    from datetime import datetime

    try:
        year = datetime.fromisoformat(epoch).year
    except ValueError:
        year = None
    if year is None or not 1 < year < 9000:
        msg = f"{path}: epoch {epoch[:60]!r} is not an ISO-8601 date-time (years 2-8999)"
        raise TraceError(msg, details=[msg])


def read_trace(path: str | Path, *, validate: bool = True, for_replay: bool = False) -> Trace:
    """Read a canonical trace; raises :class:`TraceError` listing every problem found.

    ``for_replay`` also checks what a replay needs beyond a well-formed trace
    (:func:`~pddbench.workloads.validate.replay_problems`)."""
    from pddbench.workloads.validate import conform_table, replay_problems, validate_table

    path = Path(path)
    raw = _read_parquet(path)
    meta = raw.schema.metadata or {}
    version = meta.get(META_VERSION)
    if version is not None and version.decode(errors="replace") != str(TRACE_VERSION):
        msg = (
            f"{path}: trace format version {version.decode(errors='replace')} is not "
            f"supported (this pddbench reads version {TRACE_VERSION})"
        )
        raise TraceError(msg, details=[msg])
    table, problems = conform_table(raw, file=str(path))
    if not problems and validate:
        problems = validate_table(table, file=str(path))
    if not problems and validate and for_replay:
        problems = replay_problems(table, file=str(path))
    if problems:
        # one problem is its own one-line message; more are counted, then listed
        head = problems[0] if len(problems) == 1 else f"{path}: {len(problems)} problems in trace"
        raise TraceError(head, details=problems)
    source_text = meta.get(META_SOURCE, b"{}").decode(errors="replace")
    try:
        source = json.loads(source_text)
    except json.JSONDecodeError:
        source = {"text": source_text}
    epoch = meta.get(META_EPOCH)
    if epoch and validate:
        _check_epoch(path, epoch.decode(errors="replace"))
    return Trace(
        table=table,
        epoch=epoch.decode() if epoch else None,
        source=source if isinstance(source, dict) else {"value": source},
        path=str(path),
    )
