"""The theoretical prefix-cache hit of every request in a trace.

Replays a trace in arrival order (stable for equal arrivals) into a prefix cache of KV
blocks and gives each request its cached tokens and hit rate:

* only **full** blocks are cacheable (a partial last block is never reused by real
  engines), so ``cached_tokens`` is a multiple of the block size;
* a request's hit is the **leading run** of its full blocks already present when it
  arrives (the radix-tree match); its own blocks are inserted afterwards;
* block hashes are position-chained, so "hash seen before" means "whole prefix path
  seen before".

Two cache models:

* unbounded (``capacity_blocks=None``): vectorised — a block is a hit iff its hash
  occurred earlier in the arrival-ordered flattening (``pandas.Series.duplicated``); the
  leading run comes from the first miss of each row. Handles 10^8 blocks in seconds.
  (A hash repeated *within* one request would count as a hit; chained hashes never
  repeat within a request.)
* LRU with a capacity in blocks: a sequential radix-style simulation (blocks of a
  request are touched leaf-to-root so that leaves are evicted before their ancestors).
  Pure Python: fine for traces up to a few million blocks.

Sans-IO: takes an Arrow table, returns numpy arrays.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.workloads.schema import Col


@dataclass(frozen=True)
class HitResult:
    """Per-request cache outcome, aligned with the input table's row order."""

    cached_tokens: np.ndarray  # int64
    hit_rate: np.ndarray  # float64 in [0, 1]
    capacity_blocks: int | None

    def token_weighted(self, input_length: np.ndarray) -> float:
        """Cached tokens ÷ input tokens over the whole trace."""
        total = float(np.sum(input_length, dtype=np.float64))
        return float(self.cached_tokens.sum()) / total if total > 0 else 0.0


def arrival_order(table: pa.Table) -> np.ndarray | None:
    """Stable arrival order of rows, or ``None`` when the table is already ordered."""
    arrival = table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False)
    if arrival.size < 2 or bool(np.all(arrival[1:] >= arrival[:-1])):
        return None
    return np.argsort(arrival, kind="stable")


def _full_block_lists(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat full-block hashes in row order: (values, row_starts, full_counts)."""
    lists = table.column(Col.BLOCK_HASHES).combine_chunks()
    if isinstance(lists, pa.ChunkedArray):  # an empty table
        lists = pa.array([], type=pa.list_(pa.uint64()))
    input_length = table.column(Col.INPUT_LENGTH).to_numpy(zero_copy_only=False).astype(np.int64)
    block_size = table.column(Col.BLOCK_SIZE).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    full = np.minimum(input_length // np.maximum(block_size, 1), lengths)
    offsets = lists.offsets.to_numpy().astype(np.int64)
    # a sliced list array's offsets point into a larger child: rebase onto our slice
    values = lists.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    starts = offsets[:-1]
    if np.array_equal(full, lengths):
        return values, starts, full
    # drop the trailing (partial or surplus) entries of rows that carry them
    keep = np.ones(values.size, dtype=bool)
    surplus = lengths - full
    rows = np.flatnonzero(surplus > 0)
    for k in range(int(surplus.max()) if rows.size else 0):
        sel = rows[surplus[rows] > k]
        keep[offsets[1:][sel] - 1 - k] = False
    kept_values = values[keep]
    new_starts = np.zeros(full.size, dtype=np.int64)
    if full.size > 1:
        np.cumsum(full[:-1], out=new_starts[1:])
    return kept_values, new_starts, full


def _unbounded_matched_blocks(
    values: np.ndarray, starts: np.ndarray, full: np.ndarray
) -> np.ndarray:
    """Leading-run length of previously seen hashes, per row (rows in arrival order)."""
    n = full.size
    if values.size == 0:
        return np.zeros(n, dtype=np.int64)
    seen_before = pd.Series(values, copy=False).duplicated(keep="first").to_numpy()
    # cum[i] = number of seen blocks among the first i flat entries
    cum = np.zeros(values.size + 1, dtype=np.int64 if values.size >= 2**31 else np.int32)
    np.cumsum(seen_before, out=cum[1:])
    seen_in_row = (cum[starts + full] - cum[starts]).astype(np.int64)
    # Chained hashes make "seen" prefix-closed within a row, so the leading run equals
    # the row's seen count; verify that and fall back to a scan where it does not hold.
    leading_ok = (cum[starts + seen_in_row] - cum[starts]) == seen_in_row
    matched = seen_in_row
    for row in np.flatnonzero(~leading_ok):
        segment = seen_before[starts[row] : starts[row] + full[row]]
        matched[row] = int(np.argmin(segment))  # first miss (exists: seen count < length)
    return matched


def _lru_matched_blocks(
    values: np.ndarray, starts: np.ndarray, full: np.ndarray, capacity_blocks: int
) -> np.ndarray:
    """Sequential LRU radix-style simulation; see the module docstring."""
    cache: OrderedDict[int, None] = OrderedDict()
    matched = np.zeros(full.size, dtype=np.int64)
    values_list = values.tolist()
    for row in range(full.size):
        start = int(starts[row])
        blocks = values_list[start : start + int(full[row])]
        hit = 0
        for h in blocks:
            if h in cache:
                hit += 1
            else:
                break
        matched[row] = hit
        for h in reversed(blocks):  # leaf first, root last: ancestors stay most recent
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        while len(cache) > capacity_blocks:
            cache.popitem(last=False)
    return matched


def prefix_hits(table: pa.Table, *, capacity_blocks: int | None = None) -> HitResult:
    """Theoretical cached tokens and hit rate of every request (row order of ``table``)."""
    if capacity_blocks is not None and capacity_blocks < 0:
        raise ValueError("capacity_blocks must be >= 0")
    order = arrival_order(table)
    ordered = table.take(pa.array(order)) if order is not None else table
    values, starts, full = _full_block_lists(ordered)
    if capacity_blocks is None:
        matched = _unbounded_matched_blocks(values, starts, full)
    else:
        matched = _lru_matched_blocks(values, starts, full, capacity_blocks)
    block_size = ordered.column(Col.BLOCK_SIZE).to_numpy(zero_copy_only=False).astype(np.int64)
    input_length = ordered.column(Col.INPUT_LENGTH).to_numpy(zero_copy_only=False).astype(np.int64)
    cached = np.minimum(matched * block_size, input_length)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(input_length > 0, cached / np.maximum(input_length, 1), 0.0)
    if order is not None:
        unsorted_cached = np.empty_like(cached)
        unsorted_cached[order] = cached
        unsorted_rate = np.empty_like(rate)
        unsorted_rate[order] = rate
        cached, rate = unsorted_cached, unsorted_rate
    return HitResult(cached_tokens=cached, hit_rate=rate, capacity_blocks=capacity_blocks)
