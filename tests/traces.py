"""The one trace builder of the tests: sessions of chained turns, as a table or a file.

Session ``s`` has turns ``s{s}-t0 .. s{s}-t{turns-1}``, each the child of the one before;
turn ``t`` arrives at ``session_gap_s * s + turn_gap_s * t`` with ``think_s`` of think
time (none on the first turn); its prompt is ``hashes(s, t)`` blocks of ``block`` tokens
(default: the previous turn's blocks plus one, so later turns hit the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import overload

import pyarrow as pa

from pddbench.workloads.traceio import build_table, write_trace

Hashes = Callable[[int, int], Sequence[int]]


def growing_prefix(s: int, t: int) -> list[int]:
    """Turn ``t`` of session ``s`` repeats the session's earlier blocks and adds one."""
    return [1000 * s + b for b in range(t + 1)]


def chain_table(
    *,
    sessions: int = 20,
    turns: int = 3,
    session_gap_s: float = 0.05,
    turn_gap_s: float = 1.0,
    think_s: float = 0.02,
    block: int = 64,
    output_tokens: int = 16,
    hashes: Hashes = growing_prefix,
) -> pa.Table:
    cols: dict[str, list] = {k: [] for k in ("rid", "sid", "turn", "arr", "inp", "par", "h", "th")}
    for s in range(sessions):
        for t in range(turns):
            blocks = list(hashes(s, t))
            cols["rid"].append(f"s{s}-t{t}")
            cols["sid"].append(f"s{s}")
            cols["turn"].append(t)
            cols["arr"].append(session_gap_s * s + turn_gap_s * t)
            cols["inp"].append(len(blocks) * block)
            cols["par"].append(f"s{s}-t{t - 1}" if t else None)
            cols["h"].append(blocks)
            cols["th"].append(think_s if t else None)
    return build_table(
        request_id=cols["rid"],
        session_id=cols["sid"],
        turn_index=cols["turn"],
        arrival_s=cols["arr"],
        input_length=cols["inp"],
        output_length=[output_tokens] * len(cols["rid"]),
        block_size=block,
        block_hashes=cols["h"],
        parent_request_id=cols["par"],
        think_time_s=cols["th"],
    )


@overload
def chain_trace(path: None = None, **kw: object) -> pa.Table: ...
@overload
def chain_trace(path: Path, **kw: object) -> Path: ...
def chain_trace(path: Path | None = None, **kw: object) -> pa.Table | Path:
    """:func:`chain_table`, written to ``path`` (a canonical trace file) when given."""
    table = chain_table(**kw)  # type: ignore[arg-type]
    return table if path is None else write_trace(table, path)
