"""The hit-rate model: hand-computed cases and invariants against a reference simulation."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.traceio import build_table


def _table(rows: list[tuple[float, int, list[int]]], block_size: int = 4):
    n = len(rows)
    return build_table(
        request_id=[f"r{i}" for i in range(n)],
        session_id=[f"s{i}" for i in range(n)],
        turn_index=[0] * n,
        arrival_s=[r[0] for r in rows],
        input_length=[r[1] for r in rows],
        output_length=[1] * n,
        block_size=block_size,
        block_hashes=[r[2] for r in rows],
    )


def test_hand_computed_with_partial_blocks() -> None:
    # block size 4; "ceil" lists carry a partial last block that is never cacheable
    t = _table([(0, 9, [1, 2, 3]), (1, 14, [1, 2, 4, 5]), (2, 8, [1, 2]), (3, 6, [1, 7])])
    r = prefix_hits(t)
    # r0: nothing cached; r1: blocks 1,2 seen (3 was partial in r0, 4 is new) -> 8 tokens
    # r2: 1,2 -> 8 of 8; r3: full blocks [1] -> 4 of 6
    assert r.cached_tokens.tolist() == [0, 8, 8, 4]
    np.testing.assert_allclose(r.hit_rate, [0, 8 / 14, 1.0, 4 / 6])
    assert abs(r.token_weighted(np.array([9, 14, 8, 6])) - 20 / 37) < 1e-12


def test_leading_run_stops_at_first_miss() -> None:
    t = _table([(0, 12, [1, 2, 3]), (1, 12, [1, 9, 3])])
    assert prefix_hits(t).cached_tokens.tolist() == [0, 4]


def test_arrival_order_not_row_order() -> None:
    # row 0 arrives after row 1: row 1 is the one that misses
    t = _table([(5.0, 8, [1, 2]), (1.0, 8, [1, 2])])
    assert prefix_hits(t).cached_tokens.tolist() == [8, 0]


def test_lru_evicts_leaves_before_ancestors() -> None:
    t = _table([(0, 8, [1, 2]), (1, 8, [3, 4]), (2, 8, [1, 2]), (3, 8, [3, 4])])
    # capacity 3: after r1 the cache holds {1 or 2 evicted...}: LRU evicts the oldest leaf
    r = prefix_hits(t, capacity_blocks=3)
    # after r0: [2,1] (1 most recent); r1 adds 4,3 -> evict 2 -> {1,4,3}; r2 matches 1 only
    assert r.cached_tokens.tolist() == [0, 0, 4, 4]
    assert prefix_hits(t, capacity_blocks=0).cached_tokens.tolist() == [0, 0, 0, 0]


def _reference(rows: list[tuple[float, int, list[int]]], block_size: int) -> list[int]:
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    seen: set[int] = set()
    out = [0] * len(rows)
    for i in order:
        _, length, hashes = rows[i]
        full = hashes[: length // block_size]
        k = 0
        while k < len(full) and full[k] in seen:
            k += 1
        out[i] = k * block_size
        seen.update(full)
    return out


@st.composite
def _chained_traces(draw):
    block_size = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(1, 25))
    rows = []
    paths: list[list[int]] = [[]]
    next_id = 1
    for _ in range(n):
        base = draw(st.sampled_from(paths))
        keep = draw(st.integers(0, len(base)))
        new = draw(st.integers(0, 5))
        hashes = base[:keep] + list(range(next_id, next_id + new))
        next_id += new
        paths.append(hashes)
        if not hashes:
            hashes = [next_id]
            next_id += 1
        partial = draw(st.integers(0, block_size - 1))
        length = (len(hashes) - (1 if partial else 0)) * block_size + partial
        if length <= 0:
            length = block_size
            hashes = hashes[:1]
        rows.append((draw(st.floats(0, 100, allow_nan=False)), length, hashes))
    return rows, block_size


@settings(max_examples=150, deadline=None)
@given(_chained_traces())
def test_vectorised_matches_reference_and_lru_with_room(case) -> None:
    rows, block_size = case
    t = _table(rows, block_size)
    expected = _reference(rows, block_size)
    assert prefix_hits(t).cached_tokens.tolist() == expected
    assert prefix_hits(t, capacity_blocks=10**9).cached_tokens.tolist() == expected
    small = prefix_hits(t, capacity_blocks=3).cached_tokens
    assert np.all(small <= np.array(expected))
