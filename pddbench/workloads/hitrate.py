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
    """Flat full-block hashes in row order: (values, row_starts, full_counts).

    One pass over the list column's chunks into one preallocated array: entries past a
    row's full blocks (the partial last block) are dropped; nothing is copied twice.
    """
    input_length = table.column(Col.INPUT_LENGTH).to_numpy(zero_copy_only=False).astype(np.int64)
    block_size = table.column(Col.BLOCK_SIZE).to_numpy(zero_copy_only=False).astype(np.int64)
    chunks = [c for c in table.column(Col.BLOCK_HASHES).chunks if len(c)]
    lengths = np.concatenate(
        [np.diff(c.offsets.to_numpy().astype(np.int64)) for c in chunks] or [np.zeros(0, int)]
    )
    full = np.minimum(input_length // np.maximum(block_size, 1), lengths)
    starts = np.zeros(full.size, dtype=np.int64)
    if full.size > 1:
        np.cumsum(full[:-1], out=starts[1:])
    values = np.empty(int(full.sum()), dtype=np.uint64)
    row = 0
    for chunk in chunks:
        n = len(chunk)
        offsets = chunk.offsets.to_numpy().astype(np.int64)
        # a sliced list array's offsets point into a larger child: rebase onto our slice
        child = chunk.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
        offsets -= offsets[0]
        chunk_full = full[row : row + n]
        out = values[starts[row] : starts[row] + int(chunk_full.sum())]
        surplus = np.diff(offsets) - chunk_full
        if not surplus.any():
            out[:] = child
        else:
            keep = np.ones(child.size, dtype=bool)
            rows = np.flatnonzero(surplus > 0)
            for k in range(int(surplus.max())):
                sel = rows[surplus[rows] > k]
                keep[offsets[sel] + chunk_full[sel] + k] = False
            np.compress(keep, child, out=out)
        row += n
    return values, starts, full


def _unbounded_matched_blocks(
    values: np.ndarray, starts: np.ndarray, full: np.ndarray
) -> np.ndarray:
    """Leading run of previously seen hashes, per row (rows in arrival order)."""
    matched = full.copy()
    if values.size == 0:
        return matched
    seen_before = pd.Series(values, copy=False).duplicated(keep="first").to_numpy()
    miss_idx = np.flatnonzero(~seen_before)
    if miss_idx.size:
        # map each miss to its row (rows with blocks only), keep the first miss per row
        nonempty = np.flatnonzero(full > 0)
        miss_row = nonempty[np.searchsorted(starts[nonempty], miss_idx, side="right") - 1]
        first = np.ones(miss_row.size, dtype=bool)
        first[1:] = miss_row[1:] != miss_row[:-1]
        rows = miss_row[first]
        matched[rows] = miss_idx[first] - starts[rows]
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


@dataclass(frozen=True)
class FirstSeen:
    """Where every full block of an arrival-ordered trace was first seen: for each block of
    each row (the flat order of ``_full_block_lists``), the first row holding its hash.

    One rule for "seen before" with a bound: a row's leading run of blocks first seen in a
    row below a bound (:meth:`leading`) is its unbounded-cache hit when the bound is the row
    itself (as :func:`prefix_hits` counts) and what the trace's history before a time holds
    of its prefix when the bound is the first row at that time (what a cache primed with
    that history holds). Chained hashes make ``first_row`` non-decreasing along a row."""

    first_row: np.ndarray  # int32 (int64 past 2^31 rows), one per full block
    starts: np.ndarray  # int64, each row's first block in ``first_row``
    full: np.ndarray  # int64, each row's full blocks

    @classmethod
    def of(cls, ordered: pa.Table) -> FirstSeen:
        """Of a table already in arrival order (``arrival_order(ordered) is None``)."""
        values, starts, full = _full_block_lists(ordered)
        if values.size == 0:
            return cls(np.zeros(0, dtype=np.int64), starts, full)
        codes, _ = pd.factorize(values)  # codes in the order hashes first appear
        del values
        first = np.empty(codes.size, dtype=bool)
        first[0] = True
        np.greater(codes[1:], np.maximum.accumulate(codes)[:-1], out=first[1:])
        first_flat = np.flatnonzero(first)  # code c's first occurrence, in code order
        nonempty = np.flatnonzero(full > 0)
        first_row_of_code = nonempty[np.searchsorted(starts[nonempty], first_flat, "right") - 1]
        dtype = np.int32 if full.size < 2**31 else np.int64  # jan-feb: 0.44 GB, not 0.88
        return cls(first_row_of_code.astype(dtype)[codes], starts, full)

    def leading(self, rows: np.ndarray, bound: np.ndarray) -> np.ndarray:
        """Per row of ``rows``: its leading full blocks first seen in a row ``< bound``."""
        rows = np.asarray(rows, dtype=np.int64)
        lens = self.full[rows]
        total = int(lens.sum())
        out = lens.copy()
        if total == 0:
            return out
        seg = np.zeros(rows.size, dtype=np.int64)
        np.cumsum(lens[:-1], out=seg[1:])
        within = np.arange(total, dtype=np.int64) - np.repeat(seg, lens)
        seen = self.first_row[np.repeat(self.starts[rows], lens) + within]
        bad = seen >= np.repeat(np.asarray(bound, dtype=np.int64), lens)
        cand = np.where(bad, within, np.iinfo(np.int64).max)
        has = lens > 0
        out[has] = np.minimum(lens[has], np.minimum.reduceat(cand, seg[has]))
        return out


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
