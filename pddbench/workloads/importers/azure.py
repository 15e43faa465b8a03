"""Importer for Azure LLM inference traces (CSV ``TIMESTAMP, ContextTokens,
GeneratedTokens``) → canonical trace.

The Azure traces carry arrival times and lengths only: no sessions, no prefix
information. Mapping:

* one request per row, each its own session at turn 0: ``request_id`` = ``session_id`` =
  ``az-NNNNNN`` (0-based data row, zero-padded to ≥ 6 digits);
* ``arrival_s`` = seconds since the earliest ``TIMESTAMP``; the trace's ``epoch`` is that
  timestamp in ISO-8601 UTC (timestamps without a zone are taken as UTC);
* ``input_length`` = ``ContextTokens`` (≥ 1), ``output_length`` = ``GeneratedTokens``
  (0 becomes 1, with a warning);
* ``block_size`` = 512 by default (an option); ``block_hashes`` lists the full blocks only,
  each a distinct value from a counter: ``AZURE_HASH_BASE + k`` for the k-th block of the
  file, so no two blocks share a hash and the trace has no prefix hits at all. The tag
  in the top byte keeps these values away from small sequential ids of other traces.

Parsing uses pandas (vectorised); every bad cell is reported as ``FILE: line N: ...`` with
``N`` the 1-based line of the file (the header is line 1). Owns parsing and mapping; does
not write files (the CLI does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.workloads.importers.common import (
    ImportResult,
    check_block_size_option,
    check_input_file,
    fail,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.csvtable import integers, line, read_csv
from pddbench.workloads.traceio import build_table, hashes_from_flat

AZURE_BLOCK_SIZE = 512
AZURE_HASH_BASE = 0xA2 << 56
REQUEST_PREFIX = "az-"
TIMESTAMP = "TIMESTAMP"
CONTEXT_TOKENS = "ContextTokens"
GENERATED_TOKENS = "GeneratedTokens"


def _one_timestamp(value: object) -> pd.Timestamp | None:
    """One date-time, or None when it is not one pandas can hold (years 1677-2262)."""
    try:
        stamp = pd.to_datetime(value, format="ISO8601", utc=True)
    except (pd.errors.OutOfBoundsDatetime, OverflowError, ValueError, TypeError):
        return None
    return None if pd.isna(stamp) else stamp


def _timestamps(src: Path, frame: pd.DataFrame) -> pd.DatetimeIndex:
    raw = frame[TIMESTAMP]
    try:
        parsed = pd.to_datetime(raw, format="ISO8601", utc=True, errors="coerce")
    except (pd.errors.OutOfBoundsDatetime, OverflowError, ValueError):
        parsed = pd.Series([_one_timestamp(v) for v in raw], index=raw.index)
    lo, hi = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
    in_range = ((parsed >= lo) & (parsed <= hi)).to_numpy(dtype=bool, na_value=False)
    bad = parsed.isna().to_numpy() | ~in_range  # nanoseconds hold years 1677-2262 only
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail(
            f"{src}: line {line(frame.index[i])}",
            f"{TIMESTAMP} {raw.iloc[i]!r} is not a date-time (years 1677-2262)",
        )
    return pd.DatetimeIndex(parsed).as_unit("ns")  # pandas may pick s or us otherwise


def import_azure(src: Path, *, block_size: int = AZURE_BLOCK_SIZE) -> ImportResult:
    """Read an Azure LLM inference CSV trace; see the module docstring."""
    check_block_size_option(block_size)
    src = check_input_file(Path(src))
    frame = read_csv(src, (TIMESTAMP, CONTEXT_TOKENS, GENERATED_TOKENS))
    if frame.empty:
        raise fail(str(src), "no requests (header only)")
    stamps = _timestamps(src, frame)
    context = integers(src, frame, CONTEXT_TOKENS, minimum=1)
    generated = integers(src, frame, GENERATED_TOKENS, minimum=0)
    output_length, warnings = lift_zero_outputs(
        generated, lambda i: f"{src}: line {line(frame.index[i])}"
    )

    ns = stamps.asi8
    first = int(ns.min())
    arrival = (ns - first) / 1e9
    if np.any(ns[1:] < ns[:-1]):
        warnings.append(f"{src}: rows are not in time order; arrivals keep each row's own time")
    epoch = pd.Timestamp(first, tz="UTC").isoformat()

    n = len(frame)
    width = max(6, len(str(n - 1)))
    ids = [f"{REQUEST_PREFIX}{i:0{width}d}" for i in range(n)]
    full = context // block_size
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(full, out=offsets[1:])
    values = np.uint64(AZURE_HASH_BASE) + np.arange(offsets[-1], dtype=np.uint64)

    table = build_table(
        request_id=ids,
        session_id=ids,
        turn_index=np.zeros(n, dtype=np.int32),
        arrival_s=arrival,
        input_length=context,
        output_length=output_length,
        block_size=block_size,
        block_hashes=hashes_from_flat(offsets, values),
    )
    source = source_record("azure", [src], {"block_size": block_size})
    return ImportResult(table=table, epoch=epoch, source=source, warnings=warnings)
