"""Block hashes for importers whose format does not give position-chained ones (pure).

Two jobs, both vectorised over whole columns:

* :func:`chain_hashes` turns per-block ids (each naming one block's *content*, as the
  Bailian trace's SipHash ids may) into position-chained hashes: value ``k`` of a row is
  a mix of value ``k-1`` and id ``k``, so two rows share value ``k`` only when they share
  ids ``0..k`` — the prefix rule of the canonical trace. Ids that were already chained
  come out chained still (equal prefixes, equal values), so chaining is safe either way.
  The mix is SplitMix64 over 64-bit wrapping arithmetic: values use the whole ``uint64``
  range (half of them past 2^63); unequal prefixes collide only by 64-bit chance.
* :func:`inherited_blocks` builds blocks for formats that say only how many tokens a
  request shares with the request it continues (TraceLab's ``prefix_tokens``,
  OpenTelemetry's cached-token count) or nothing at all (a stated synthetic model such as
  "the prompt starts with the previous prompt"): the first ``shared // block_size`` full
  blocks are the parent's own values, the rest are fresh values never used elsewhere in
  the trace (``base + position in the file``; the caller picks ``base``'s top byte per
  format). Only full blocks are listed (``floor(input / block_size)``).

Must not know any trace format; the importers say which rule they apply and why.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pddbench.workloads.materialize import splitmix64, stable_hash64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def chain_hashes(offsets: np.ndarray, ids: np.ndarray, *, namespace: str) -> np.ndarray:
    """Position-chained ``uint64`` values for the per-block ``ids`` of each row.

    ``offsets`` (length rows + 1) cut the flat ``ids`` into rows. ``namespace`` seeds
    position 0, so equal ids of different namespaces (traces) give unrelated values.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.uint64)
    out = np.empty(ids.size, dtype=np.uint64)
    lengths = np.diff(offsets)
    if ids.size == 0:
        return out
    by_length = np.argsort(-lengths, kind="stable")
    descending = lengths[by_length]
    state = np.full(lengths.size, np.uint64(stable_hash64(namespace)), dtype=np.uint64)
    mixed_ids = splitmix64(ids)
    with np.errstate(over="ignore"):
        for k in range(int(descending[0])):
            live = int(np.searchsorted(-descending, -k, side="left"))  # rows longer than k
            rows = by_length[:live]
            flat = offsets[:-1][rows] + k
            state[:live] = splitmix64((state[:live] * _GOLDEN) ^ mixed_ids[flat])
            out[flat] = state[:live]
    return out


def inherited_blocks(
    *,
    parent: np.ndarray,
    turn: np.ndarray,
    shared_tokens: np.ndarray,
    input_length: np.ndarray,
    block_size: int,
    base: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, values)`` of full-block hashes where each row inherits its parent's first
    ``shared_tokens // block_size`` blocks (at most all of them) and is fresh after.

    ``parent`` is the row each row continues (``-1``: none) and must be the row of turn
    ``turn - 1`` of the same session, so rows are resolved turn by turn.
    """
    parent = np.asarray(parent, dtype=np.int64)
    turn = np.asarray(turn, dtype=np.int64)
    full = np.asarray(input_length, dtype=np.int64) // block_size
    offsets = np.zeros(full.size + 1, dtype=np.int64)
    np.cumsum(full, out=offsets[1:])
    values = np.uint64(base) + np.arange(offsets[-1], dtype=np.uint64)
    has_parent = parent >= 0
    inherit = np.zeros(full.size, dtype=np.int64)
    shared = np.maximum(np.asarray(shared_tokens, dtype=np.int64), 0) // block_size
    inherit[has_parent] = np.minimum(
        np.minimum(shared[has_parent], full[has_parent]), full[parent[has_parent]]
    )
    rows = np.flatnonzero(inherit > 0)
    if rows.size == 0:
        return offsets, values
    levels = turn[rows]
    for level in np.unique(levels):  # parents (turn - 1) are final before their children
        at = rows[levels == level]
        counts = inherit[at]
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        child = np.repeat(offsets[:-1][at], counts) + within
        source = np.repeat(offsets[:-1][parent[at]], counts) + within
        values[child] = values[source]
    return offsets, values


def think_times(
    previous: np.ndarray, arrival: np.ndarray, done: np.ndarray
) -> tuple[np.ndarray, int]:
    """Think time of each turn: its arrival minus the previous turn's completion ``done``.

    NaN where there is no previous turn or its completion is unknown (``done`` NaN).
    A turn sent before the previous one completed gets 0; the count of such turns is
    returned so the importer can say so.
    """
    previous = np.asarray(previous, dtype=np.int64)
    think = np.full(previous.size, np.nan)
    has = previous >= 0
    think[has] = np.asarray(arrival, dtype=np.float64)[has] - np.asarray(done)[previous[has]]
    early = int(np.count_nonzero(think < 0))
    think[think < 0] = 0.0
    return think, early


def nullable(values: np.ndarray) -> pa.Array:
    """A float column with NaN as null (a nullable trace column such as think time)."""
    return pa.array(np.asarray(values, dtype=np.float64), type=pa.float64(), from_pandas=True)
