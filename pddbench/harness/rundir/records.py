"""Request records: the one-row-per-request result table, its journal and finalisation.

Owns :class:`RequestRecord` (what the client measured about one request), the Arrow
schema of ``requests.parquet``, and the crash-safe path to it: records are appended to a
JSON-lines journal that is flushed at least every ``flush_interval_s`` (default 1 s), so
a crash (SIGKILL included) loses at most the last interval; :func:`finalize_journal`
turns a journal — complete or cut off mid-line — into ``requests.parquet``.

Times are seconds on the run's monotonic clock, measured from the run's start; the
manifest holds the wall-clock anchor of that start.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from dataclasses import MISSING, asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import orjson  # ~10x faster rows than json
import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.errors import UserError


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"  # the server sent nothing for the stall limit
    CENSORED = "censored"  # cut by the harness's own request limit while still answering
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # never sent: a request it depends on failed (abort-session policy)


class ErrorClass(StrEnum):
    CONNECT = "connect"  # could not reach the server
    HTTP = "http"  # non-2xx status
    STREAM = "stream"  # malformed or truncated stream, server-sent error event
    TIMEOUT = "timeout"
    REQUEST_LIMIT = "request_limit"  # censored: the harness's limit, not a server failure
    INTEGRITY = "integrity"  # tokens duplicated / missing / reordered (reference servers)
    OUTPUT_LENGTH = "output_length"  # zero, too few (with ignore_eos) or too many tokens
    CANCELLED = "cancelled"
    DEPENDENCY = "dependency"
    CLIENT = "client"  # the client itself failed (an exception in the harness), not the server


class Role(StrEnum):
    """What a record column is to its readers (declared once, on :class:`RequestRecord`)."""

    KEY = "key"  # identifies the request or its parent
    CATEGORY = "category"  # a label the analysis groups and filters by
    TIME = "time"  # an instant: seconds on the run clock (moved by a worker's clock offset)
    NUMBER = "number"  # a duration, count or size
    TOKEN_TIMES = "token_times"  # every token's arrival instant (run clock), optional
    OTHER = "other"  # kept in the table, read by no metric (messages, JSON, flags)


def _col(
    role: Role, default: Any = MISSING, *, required: bool = False, latency: bool = False
) -> Any:
    """A record field of ``role``; ``required``: a records table without it is unreadable;
    ``latency``: a user-facing latency, never negative in a readable table."""
    return field(default=default, metadata={"role": role, "required": required, "latency": latency})


@dataclass
class RequestRecord:
    """Everything the client measured about one request (each field's :class:`Role`)."""

    request_id: str = _col(Role.KEY, required=True)
    session_id: str = _col(Role.CATEGORY, required=True)
    turn_index: int = _col(Role.NUMBER)
    parent_request_id: str | None = _col(Role.KEY)
    intended_send_s: float = _col(Role.TIME, required=True)
    actual_send_s: float | None = _col(Role.TIME, None)
    first_token_s: float | None = _col(Role.TIME, None)
    last_token_s: float | None = _col(Role.TIME, None)
    end_s: float | None = _col(Role.TIME, None)
    ttft_s: float | None = _col(Role.NUMBER, None, latency=True)
    e2e_s: float | None = _col(Role.NUMBER, None, latency=True)
    # TPOT: (last - first token) / (output - 1)
    tpot_s: float | None = _col(Role.NUMBER, None, latency=True)
    itl_mean_s: float | None = _col(Role.NUMBER, None)
    itl_p50_s: float | None = _col(Role.NUMBER, None)
    itl_p90_s: float | None = _col(Role.NUMBER, None)
    itl_p99_s: float | None = _col(Role.NUMBER, None)
    itl_max_s: float | None = _col(Role.NUMBER, None)
    chunks: int = _col(Role.NUMBER, 0)
    input_tokens: int = _col(Role.NUMBER, 0)
    output_tokens: int = _col(Role.NUMBER, 0)
    expected_output_tokens: int = _col(Role.NUMBER, 0)
    cached_tokens_theoretical: int | None = _col(Role.NUMBER, None)
    cached_tokens_reported: int | None = _col(Role.NUMBER, None)
    client_queue_s: float = _col(Role.NUMBER, 0.0)  # waiting for the concurrency cap
    pipeline: str | None = _col(Role.CATEGORY, None)
    first_token_origin: str | None = _col(Role.CATEGORY, None)
    relay_tokens: int | None = _col(Role.NUMBER, None)
    handoff_mode: str | None = _col(Role.CATEGORY, None)
    wan_bytes: int | None = _col(Role.NUMBER, None)
    integrity_ok: bool | None = _col(Role.OTHER, None)
    status: str = _col(Role.CATEGORY, Status.OK, required=True)
    error_class: str | None = _col(Role.CATEGORY, None)
    error_message: str | None = _col(Role.OTHER, None)
    server_timing: str | None = _col(Role.OTHER, None)  # the server's `pdd` object, JSON
    agent_type: str | None = _col(Role.CATEGORY, None)  # the trace's, where it has one
    # TTFT decomposition from the server's story (analysis.ttft_parts; None: not decomposable)
    ttft_to_router_s: float | None = _col(Role.NUMBER, None)
    ttft_router_queue_s: float | None = _col(Role.NUMBER, None)
    ttft_p_queue_s: float | None = _col(Role.NUMBER, None)
    ttft_prefill_s: float | None = _col(Role.NUMBER, None)
    ttft_kv_transfer_s: float | None = _col(Role.NUMBER, None)
    ttft_kv_landing_s: float | None = _col(Role.NUMBER, None)
    ttft_first_decode_s: float | None = _col(Role.NUMBER, None)
    ttft_to_client_s: float | None = _col(Role.NUMBER, None)
    kv_path: str | None = _col(Role.CATEGORY, None)  # path of the first-token instance's KV
    handoff_s: float | None = _col(Role.NUMBER, None)  # RLD -> MD handoff, send to last ack
    extend_s: float | None = _col(Role.NUMBER, None)  # MD's extend steps, summed
    token_times_s: list[float] | None = _col(Role.TOKEN_TIMES, None)  # noqa: RUF009 (a field())

    @property
    def send_lag_s(self) -> float | None:
        if self.actual_send_s is None:
            return None
        return self.actual_send_s - self.intended_send_s


_ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "str | None": pa.string(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "float": pa.float64(),
    "float | None": pa.float64(),
    "bool | None": pa.bool_(),
    "list[float] | None": pa.list_(pa.float64()),
}


def records_schema() -> pa.Schema:
    """Arrow schema of ``requests.parquet`` (derived from :class:`RequestRecord`)."""
    cols = [pa.field(f.name, _ARROW_TYPES[str(f.type)]) for f in fields(RequestRecord)]
    return pa.schema(cols)


RECORDS_SCHEMA = records_schema()
RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


def latency_columns() -> tuple[str, ...]:
    """The user-facing latencies (TTFT, E2E, TPOT): the columns a reader refuses negative."""
    return tuple(f.name for f in fields(RequestRecord) if f.metadata["latency"])


def columns(*roles: Role) -> tuple[str, ...]:
    """The record columns of ``roles``, in record order."""
    return tuple(f.name for f in fields(RequestRecord) if f.metadata["role"] in roles)


REQUIRED_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(RequestRecord) if f.metadata["required"]
)
"""Columns without which a records table cannot be read."""
ZERO_DEFAULT_COLUMNS: tuple[str, ...] = tuple(
    f.name
    for f in fields(RequestRecord)
    if isinstance(f.default, int | float) and not isinstance(f.default, bool)
)
"""Numeric columns whose record default is a number (0): a null there reads as that 0."""


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def journal_line(record: RequestRecord) -> str:
    """One JSON line for ``record`` (non-finite floats as null; fields are flat values)."""
    # orjson writes NaN/inf as null and enums as their values, like _clean + json; a value
    # it cannot serialise takes the slow path
    with contextlib.suppress(TypeError):
        row = orjson.dumps(record.__dict__, option=orjson.OPT_SERIALIZE_NUMPY)
        return row.decode() + "\n"
    row = {k: _clean(v) for k, v in asdict(record).items()}
    return json.dumps(row, separators=(",", ":")) + "\n"


class Journal:
    """Append-only JSON-lines journal of records, flushed to the OS at least every interval.

    A background thread flushes whatever was appended since the last flush once per
    ``flush_interval_s``, so a record is on its way to disk within that interval even
    when no other record follows it (a SIGKILL then loses at most the last interval).
    Appends and flushes share one lock; the flush is a buffered write, not an fsync."""

    def __init__(self, path: str | Path, *, flush_interval_s: float = 1.0, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cut_line = append and _ends_mid_line(self.path)
        self._file: IO[str] = open(self.path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
        if cut_line:  # a killed writer's last, partial line stays one unreadable line
            self._file.write("\n")
        self._interval = flush_interval_s
        self._lock = threading.Lock()
        self._dirty = False
        self._closing = threading.Event()
        self.count = 0
        self._flusher = threading.Thread(target=self._flush_loop, name="journal-flush", daemon=True)
        self._flusher.start()

    def append(self, record: RequestRecord) -> None:
        line = journal_line(record)
        with self._lock:
            self._file.write(line)
            self.count += 1
            self._dirty = True

    def _flush_loop(self) -> None:
        while not self._closing.wait(self._interval):
            with self._lock:
                if self._dirty and not self._file.closed:
                    self._file.flush()
                    self._dirty = False

    def flush(self, *, sync: bool = False) -> None:
        """Hand buffered rows to the OS (enough to survive SIGKILL of this process);
        ``sync`` also waits for the disk (only at close: fsync can block for
        milliseconds, and this runs on the replay's event loop)."""
        with self._lock:
            self._file.flush()
            self._dirty = False
            if sync:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        self._closing.set()
        if self._flusher.is_alive() and self._flusher is not threading.current_thread():
            self._flusher.join()
        if not self._file.closed:
            self.flush(sync=True)
            self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def read_journal(path: str | Path) -> tuple[list[dict[str, object]], int]:
    """Rows of a journal and the number of lines skipped: cut off (the line being written
    when the process died), not JSON, or JSON that is not a record (see :func:`is_record`)."""
    rows: list[dict[str, object]] = []
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                bad += 1
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                bad += 1
                continue
            if is_record(row):
                rows.append(row)
            elif line.strip():
                bad += 1
    return rows, bad


def _python_types(arrow: pa.DataType) -> tuple[type, ...]:
    if pa.types.is_string(arrow):
        return (str,)
    if pa.types.is_integer(arrow):
        return (int,)
    if pa.types.is_floating(arrow):
        return (int, float)
    if pa.types.is_boolean(arrow):
        return (bool,)
    return (list,)


_INT64 = 2**63
_ROW_TYPES = {f.name: _python_types(f.type) for f in RECORDS_SCHEMA}


def is_record(row: object) -> bool:
    """Whether a journal row can be a records-table row: an object with a string
    ``request_id`` whose known fields are null or of their column's type."""
    if not isinstance(row, dict) or not isinstance(row.get("request_id"), str):
        return False
    for name, types in _ROW_TYPES.items():
        value = row.get(name)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in types:
            return False
        if not isinstance(value, types):
            return False
        if isinstance(value, int) and not -_INT64 <= value < _INT64:  # past the column
            return False
        if types == (list,) and not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            return False
    return True


def records_table(rows: list[dict[str, object]]) -> pa.Table:
    """Rows (journal dicts) as an Arrow table; the last row wins for a repeated request id."""
    latest: dict[str, dict[str, object]] = {}
    for row in rows:
        latest[str(row["request_id"])] = row
    columns = {name: [row.get(name) for row in latest.values()] for name in RECORDS_SCHEMA.names}
    return pa.table(columns, schema=RECORDS_SCHEMA)


class JournalShrinks(UserError):
    """Finalising would replace a records table by one with fewer records."""


def finalize_journal(journal: str | Path, out: str | Path) -> tuple[int, int]:
    """Write ``requests.parquet`` from a journal; returns (records, skipped lines).

    Never replaces an existing ``requests.parquet`` by one holding fewer records (a
    journal emptied or damaged after the run was finalised): raises
    :class:`JournalShrinks` and leaves the file as it is."""
    rows, bad = read_journal(journal)
    table = records_table(rows)
    out = Path(out)
    if out.exists():
        try:
            existing = pq.read_metadata(out).num_rows
        except (pa.ArrowException, OSError):
            existing = 0  # unreadable: replacing it loses nothing
        if existing > table.num_rows:
            raise JournalShrinks(
                f"{journal} holds {table.num_rows} records ({bad} unreadable lines) but "
                f"{out} has {existing}: kept {out.name}"
            )
    tmp = out.with_name(out.name + ".partial")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(out)
    return table.num_rows, bad
