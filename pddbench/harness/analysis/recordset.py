"""The records of one run as numpy columns, plus the derived per-request columns.

Owns the in-memory form of ``requests.parquet`` that every metric reads: numeric columns
as float64 arrays (null -> NaN), string columns as integer codes into a category tuple
(null -> -1), the optional per-token times as an Arrow list array, and the derived
columns computed once (ok / sent masks, hit rate and its published bin, relayed flag,
schedule lag). Converting an Arrow table is the only I/O-adjacent thing it does; it never
reads files (see ``rundir``) and computes no metric (see ``metrics``).

Conventions:

* hit rate = ``cached_tokens_theoretical / input_tokens``, falling back to
  ``cached_tokens_reported`` where the theoretical value is null; NaN when neither is
  known or the request has no input tokens. Bins follow the trace conventions
  (``low <= h < high``, the last bin includes 100 %); bin ``-1`` = unknown.
* relayed = ``relay_tokens > 0`` or a pipeline name containing ``RLD`` (any case).
* schedule lag = ``actual_send_s - intended_send_s - client_queue_s``: how late the
  engine sent a request beyond any wait for the concurrency cap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.harness.rundir.records import ZERO_DEFAULT_COLUMNS, Role, columns
from pddbench.workloads.inspect import bin_index
from pddbench.workloads.schema import PUBLISHED_HIT_BINS, bin_label

# every column list is derived from the record model's roles (rundir.records.Role)
NUMERIC_COLUMNS: tuple[str, ...] = columns(Role.TIME, Role.NUMBER)
CATEGORY_COLUMNS: tuple[str, ...] = columns(Role.CATEGORY)
(TOKEN_TIMES,) = columns(Role.TOKEN_TIMES)

_T = TypeVar("_T")

HIT_BIN_LABELS: tuple[str, ...] = tuple(bin_label(lo, hi) for lo, hi in PUBLISHED_HIT_BINS)
UNKNOWN = "unknown"


def list_intervals(times: pa.ListArray | None) -> np.ndarray:
    """Consecutive differences within each list of ``times``, all lists pooled."""
    if times is None or len(times) == 0:
        return np.empty(0)
    lengths = pc.list_value_length(times).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(times).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if flat.size < 2:
        return np.empty(0)
    diffs = np.diff(flat)
    starts = np.cumsum(lengths)[:-1]  # flat index where each following list begins
    starts = starts[(starts > 0) & (starts < flat.size)]
    keep = np.ones(diffs.size, dtype=bool)
    keep[starts - 1] = False  # the step from one list's last value to the next one's first
    return diffs[keep]


@dataclass(frozen=True)
class Category:
    """A string column as codes (``-1`` = null) into ``labels``."""

    codes: np.ndarray
    labels: tuple[str, ...]

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray | pa.Array) -> Category:
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        encoded = pc.dictionary_encode(arr.cast(pa.string()))
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
        labels = tuple(str(v) for v in encoded.dictionary.to_pylist())
        return cls(codes, labels)

    @classmethod
    def empty(cls, n: int) -> Category:
        return cls(np.full(n, -1, dtype=np.int32), ())

    def take(self, mask: np.ndarray) -> Category:
        return Category(self.codes[mask], self.labels)

    def equals(self, value: str) -> np.ndarray:
        """Mask of rows whose value is ``value``."""
        if value not in self.labels:
            return np.zeros(self.codes.size, dtype=bool)
        return self.codes == self.labels.index(value)

    def values(self, null: str = UNKNOWN) -> np.ndarray:
        """The labels per row as an object array (``null`` where missing)."""
        table = np.array([*self.labels, null], dtype=object)
        return table[np.where(self.codes < 0, len(self.labels), self.codes)]

    def contains(self, text: str) -> np.ndarray:
        """Mask of rows whose value contains ``text`` (case-insensitive)."""
        hits = np.array([text.lower() in lab.lower() for lab in self.labels] + [False])
        return hits[np.where(self.codes < 0, len(self.labels), self.codes)]


class _Rows(Mapping[str, _T]):
    """Columns of a parent mapping restricted to some rows, each taken on first access."""

    def __init__(
        self, parent: Mapping[str, _T], rows: np.ndarray, take: Callable[[_T, np.ndarray], _T]
    ) -> None:
        self._parent = parent
        self._rows = rows
        self._take = take
        self._done: dict[str, _T] = {}

    def __getitem__(self, key: str) -> _T:
        if key not in self._done:
            self._done[key] = self._take(self._parent[key], self._rows)
        return self._done[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parent)

    def __len__(self) -> int:
        return len(self._parent)


@dataclass
class RecordSet:
    """The records of one run (or a subset of them), column-wise."""

    num: Mapping[str, np.ndarray]
    cat: Mapping[str, Category]
    token_source: pa.ListArray | None = None  # token_times_s of the *loaded* table
    token_rows: np.ndarray | None = None  # rows of token_source in this set (None: all)

    @cached_property
    def n(self) -> int:
        return int(self.num["intended_send_s"].size)

    def __len__(self) -> int:
        return self.n

    def col(self, name: str) -> np.ndarray:
        return self.num[name]

    @classmethod
    def from_arrow(cls, table: pa.Table) -> RecordSet:
        """Columns of a ``requests.parquet`` table (missing optional columns become null)."""
        n = table.num_rows
        num: dict[str, np.ndarray] = {}
        for name in NUMERIC_COLUMNS:
            if name in table.column_names:
                col = pc.cast(table.column(name), pa.float64())
                num[name] = (
                    col.to_numpy().astype(np.float64, copy=False)
                    if col.null_count == 0
                    else col.fill_null(np.nan).to_numpy()
                )
            else:
                num[name] = np.full(n, np.nan)
        for name in ZERO_DEFAULT_COLUMNS:
            num[name] = np.nan_to_num(num[name], nan=0.0)
        cat: dict[str, Category] = {}
        for name in CATEGORY_COLUMNS:
            if name in table.column_names:
                cat[name] = Category.from_arrow(table.column(name))
            else:
                cat[name] = Category.empty(n)
        token_times = None
        if TOKEN_TIMES in table.column_names:
            tt = table.column(TOKEN_TIMES).combine_chunks()
            if tt.null_count < len(tt):
                token_times = tt
        return cls(num, cat, token_times)

    @cached_property
    def token_times(self) -> pa.ListArray | None:
        """Per-token times of these records (materialised on first use only)."""
        if self.token_source is None:
            return None
        if self.token_rows is None:
            return self.token_source
        return self.token_source.take(pa.array(self.token_rows))

    @classmethod
    def empty(cls) -> RecordSet:
        return cls.from_arrow(pa.table({"intended_send_s": pa.array([], pa.float64())}))

    def subset(self, mask: np.ndarray) -> RecordSet:
        """The rows where ``mask`` is true (a new RecordSet; derived columns recomputed)."""
        idx = np.flatnonzero(mask)
        rows = None
        if self.token_source is not None:
            rows = idx if self.token_rows is None else self.token_rows[idx]
        return RecordSet(
            _Rows(self.num, idx, lambda v, i: v[i]),
            _Rows(self.cat, idx, lambda c, i: c.take(i)),
            self.token_source,
            rows,
        )

    # ------------------------------------------------------------------ derived

    @cached_property
    def ok(self) -> np.ndarray:
        return self.cat["status"].equals("ok")

    @cached_property
    def censored(self) -> np.ndarray:
        """Requests the harness's own request limit cut while the server still answered."""
        return self.cat["status"].equals("censored")

    @cached_property
    def sent(self) -> np.ndarray:
        return np.isfinite(self.num["actual_send_s"])

    @cached_property
    def hit_rate(self) -> np.ndarray:
        cached = self.num["cached_tokens_theoretical"]
        cached = np.where(np.isnan(cached), self.num["cached_tokens_reported"], cached)
        inp = self.num["input_tokens"]
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(inp > 0, cached / inp, np.nan)
        return np.clip(rate, 0.0, 1.0)

    @cached_property
    def served_hit_rate(self) -> np.ndarray:
        """The servers' reported cached tokens ÷ input tokens (NaN where not reported)."""
        inp = self.num["input_tokens"]
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(inp > 0, self.num["cached_tokens_reported"] / inp, np.nan)
        return np.clip(rate, 0.0, 1.0)

    @cached_property
    def hit_bin(self) -> np.ndarray:
        """Index into ``PUBLISHED_HIT_BINS`` per request; -1 when the hit rate is unknown."""
        rate = self.hit_rate
        known = np.isfinite(rate)
        idx = np.full(self.n, -1, dtype=np.int64)
        if known.any():
            idx[known] = bin_index(rate[known], PUBLISHED_HIT_BINS)
        return idx

    @cached_property
    def relayed(self) -> np.ndarray:
        relay = np.nan_to_num(self.num["relay_tokens"], nan=0.0) > 0
        return relay | self.cat["pipeline"].contains("rld")

    @cached_property
    def schedule_lag_s(self) -> np.ndarray:
        n = self.num
        return n["actual_send_s"] - n["intended_send_s"] - n["client_queue_s"]

    @cached_property
    def window_s(self) -> tuple[float, float]:
        """(first intended send, last end) over all records; NaNs when there are none."""
        start = self.num["intended_send_s"]
        end = self.num["end_s"]
        if start.size == 0 or not np.isfinite(end).any():
            return (float("nan"), float("nan"))
        return (float(np.nanmin(start)), float(np.nanmax(end)))

    @cached_property
    def duration_s(self) -> float:
        """The run window's length (NaN for an empty run or one where nothing ended)."""
        lo, hi = self.window_s
        return hi - lo
