"""Importer for Mooncake (Kimi) JSONL traces → canonical trace.

Input: one JSON object per line, ``{"timestamp": ms, "input_length": int,
"output_length": int, "hash_ids": [int, ...]}``. ``hash_ids`` are 512-token block hashes
with global scope, position-chained, and include the partial last block
(``len == ceil(input_length / 512)``; a list of full blocks only is accepted too).

Mapping:

* ``request_id`` = ``mc-NNNNNN`` (0-based row index in the file, zero-padded to ≥ 6 digits);
* ``arrival_s`` = ``timestamp / 1000`` (no epoch: the file carries no wall-clock time);
* ``block_size`` = 512, ``block_hashes`` = ``hash_ids`` unchanged (already global);
* sessions are not in the file: :func:`~.reconstruct.link_sessions` rebuilds them from
  prefix continuation (read its docstring for the rule and its limits). ``session_id`` is
  the request id of the session's first turn; ``parent_request_id`` the request continued;
  forks start branch sessions with ``parent_session_id`` set;
* ``think_time_s`` is null: only the parent's *arrival* is known, not its completion, so
  ``arrival(B) - arrival(A)`` is an upper bound on think time plus A's service time, not a
  think time. Consumers that need a think time must model it;
* ``agent_type`` is null; an ``output_length`` of 0 becomes 1, with a warning.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pddbench.errors import UserError
from pddbench.workloads.importers.common import (
    HashColumn,
    ImportResult,
    check_block_count,
    fail,
    get_hash_ids,
    get_int,
    get_number,
    json_lines,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.reconstruct import link_sessions
from pddbench.workloads.traceio import build_table

MOONCAKE_BLOCK_SIZE = 512
REQUEST_PREFIX = "mc-"


def import_mooncake(src: Path, *, min_match_blocks: int = 2) -> ImportResult:
    """Read a Mooncake JSONL trace and rebuild its sessions; see the module docstring."""
    if min_match_blocks < 1:
        raise UserError(f"min_match_blocks must be >= 1, got {min_match_blocks}")
    src = Path(src)
    timestamps: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hash_lists: list[list[int]] = []
    lines: list[str] = []
    hashes = HashColumn()

    for where, obj in json_lines(src):
        timestamps.append(get_number(obj, "timestamp", where))
        size = get_int(obj, "input_length", where, minimum=1)
        inputs.append(size)
        outputs.append(get_int(obj, "output_length", where))
        ids = get_hash_ids(obj, "hash_ids", where)
        check_block_count(len(ids), size, MOONCAKE_BLOCK_SIZE, where)
        hash_lists.append(ids.tolist())
        hashes.append(ids)
        lines.append(where)

    n = len(inputs)
    if n == 0:
        raise fail(str(src), "no requests (only blank lines)")
    output_length, warnings = lift_zero_outputs(outputs, lambda i: lines[i])
    arrival = np.asarray(timestamps, dtype=np.float64) / 1000.0
    if np.any(arrival[1:] < arrival[:-1]):
        warnings.append(
            f"{src}: timestamps are not in file order; sessions were rebuilt in arrival order"
        )

    links = link_sessions(
        arrival, inputs, hash_lists, block_size=MOONCAKE_BLOCK_SIZE,
        min_match_blocks=min_match_blocks,
    )
    width = max(6, len(str(n - 1)))
    ids = np.array([f"{REQUEST_PREFIX}{i:0{width}d}" for i in range(n)], dtype=object)
    parent_request = [ids[p] if p >= 0 else None for p in links.parent.tolist()]
    parent_session = [ids[p] if p >= 0 else None for p in links.parent_session_root.tolist()]

    table = build_table(
        request_id=ids.tolist(),
        session_id=ids[links.session_root].tolist(),
        turn_index=links.turn,
        arrival_s=arrival,
        input_length=np.asarray(inputs, dtype=np.int32),
        output_length=output_length,
        block_size=MOONCAKE_BLOCK_SIZE,
        block_hashes=hashes.to_arrow(),
        parent_request_id=parent_request,
        parent_session_id=parent_session,
    )
    source = source_record("mooncake", [src], {"min_match_blocks": min_match_blocks})
    source["sessions"] = {"count": links.num_sessions, "forks": links.num_forks}
    return ImportResult(table=table, epoch=None, source=source, warnings=warnings)
