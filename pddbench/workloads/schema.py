"""The canonical trace: one Arrow schema that every importer writes and every consumer reads.

A trace is a table with one row per request. Requests are grouped into *sessions* (an
agent task, a conversation); within a session, turns are numbered from 0 and each turn
after the first names its *parent* (the request whose context it continues). Sub-agent
sessions name the session that spawned them in ``parent_session_id``.

Prefix structure is carried as *position-chained block hashes*: the prompt is cut into
blocks of ``block_size`` tokens and ``block_hashes[i]`` identifies the whole prefix up to
and including block ``i`` (equal hashes at a position mean equal prefixes). A trace may
list only full blocks (``len == input_length // block_size``) or also the partial last
block (``len == ceil(input_length / block_size)``); both are valid.

This module owns the column names, types and file metadata. It does no I/O (see
``traceio``) and no validation beyond the schema itself (see ``validate``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TRACE_FORMAT = "pddbench-trace"
TRACE_VERSION = 1

# Metadata keys stored in the parquet/Arrow schema metadata (bytes -> bytes).
META_FORMAT = b"pddbench.format"
META_VERSION = b"pddbench.trace_version"
META_EPOCH = b"pddbench.epoch"  # ISO-8601 UTC wall-clock time of arrival offset 0, optional
META_SOURCE = b"pddbench.source"  # free text: importer / generator and its parameters (JSON)


@dataclass(frozen=True)
class Col:
    """Column names of the canonical trace (one place, used everywhere)."""

    REQUEST_ID = "request_id"
    SESSION_ID = "session_id"
    PARENT_REQUEST_ID = "parent_request_id"
    PARENT_SESSION_ID = "parent_session_id"
    TURN_INDEX = "turn_index"
    ARRIVAL = "arrival_s"
    INPUT_LENGTH = "input_length"
    OUTPUT_LENGTH = "output_length"
    BLOCK_SIZE = "block_size"
    BLOCK_HASHES = "block_hashes"
    THINK_TIME = "think_time_s"
    AGENT_TYPE = "agent_type"


TRACE_SCHEMA = pa.schema(
    [
        pa.field(Col.REQUEST_ID, pa.string(), nullable=False),
        pa.field(Col.SESSION_ID, pa.string(), nullable=False),
        pa.field(Col.PARENT_REQUEST_ID, pa.string(), nullable=True),
        pa.field(Col.TURN_INDEX, pa.int32(), nullable=False),
        pa.field(Col.ARRIVAL, pa.float64(), nullable=False),
        pa.field(Col.INPUT_LENGTH, pa.int32(), nullable=False),
        pa.field(Col.OUTPUT_LENGTH, pa.int32(), nullable=False),
        pa.field(Col.BLOCK_SIZE, pa.int32(), nullable=False),
        pa.field(Col.BLOCK_HASHES, pa.list_(pa.uint64()), nullable=False),
        pa.field(Col.THINK_TIME, pa.float64(), nullable=True),
        pa.field(Col.AGENT_TYPE, pa.string(), nullable=True),
        pa.field(Col.PARENT_SESSION_ID, pa.string(), nullable=True),
    ]
)

REQUIRED_COLUMNS: tuple[str, ...] = (
    Col.REQUEST_ID,
    Col.SESSION_ID,
    Col.TURN_INDEX,
    Col.ARRIVAL,
    Col.INPUT_LENGTH,
    Col.OUTPUT_LENGTH,
    Col.BLOCK_SIZE,
    Col.BLOCK_HASHES,
)
"""Columns a file must have; the optional ones are filled with nulls when absent."""

# The seven hit-rate bins of the published January–February figure, in percent.
PUBLISHED_HIT_BINS: tuple[tuple[float, float], ...] = (
    (0.0, 90.0),
    (90.0, 95.0),
    (95.0, 96.0),
    (96.0, 97.0),
    (97.0, 98.0),
    (98.0, 99.0),
    (99.0, 100.0),
)
COARSE_HIT_BINS: tuple[tuple[float, float], ...] = (
    (0.0, 50.0),
    (50.0, 90.0),
    (90.0, 95.0),
    (95.0, 100.0),
)


def bin_label(low: float, high: float) -> str:
    """The display label of a hit-rate bin, e.g. ``"95-96%"``."""
    return f"{low:g}-{high:g}%"


def trace_metadata(*, source: str, epoch: str | None = None) -> dict[bytes, bytes]:
    """Schema metadata for a canonical trace file."""
    meta = {
        META_FORMAT: TRACE_FORMAT.encode(),
        META_VERSION: str(TRACE_VERSION).encode(),
        META_SOURCE: source.encode(),
    }
    if epoch is not None:
        meta[META_EPOCH] = epoch.encode()
    return meta
