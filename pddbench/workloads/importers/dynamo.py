"""Importer for NVIDIA Dynamo request traces (``dynamo.request.trace.v1``, JSONL or gzipped
JSONL segments) → canonical trace.

References: Dynamo's "Request Trace Reference" and "Agent Tracing" pages
(https://docs.nvidia.com/dynamo/, observability/request-traces, agents/agent-tracing), its
replay lowering ("Trace replay": ``agent_context.session_id`` on every request,
``parent_session_id`` for sub-agents, ``exactly ceil(input_length / trace_block_size)
input_sequence_hashes``) and the recorder in ``dynamo-llm`` (``request_trace/replay.rs``:
the hashes are the router's sequence-aware 64-bit block hashes, the partial last block
hashed too). A record (the file sink may wrap it as ``{"timestamp": …, "event": {…}}``)::

    {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
     "event_time_unix_ms": 1760000001234,
     "agent_context": {"session_id": "run-42", "trajectory_id": "run-42:researcher",
                       "parent_trajectory_id": "run-42:planner"},
     "request": {"request_id": "…", "request_received_ms": 1760000000100,
                 "output_tokens": 132, "total_time_ms": 1130.0,
                 "replay": {"trace_block_size": 16, "input_length": 521,
                            "input_sequence_hashes": [14695981039346656037, …]}}}

Mapping:

* only ``request_end`` records are requests; others (``tool_*``, ``request_payload``) are
  counted and skipped. ``request_id`` = the record's ``request.request_id``;
* **sessions**: the chain a request belongs to is ``agent_context.trajectory_id`` (newer
  schema), else ``program_id`` (older), else ``session_id``; its parent chain the matching
  ``parent_trajectory_id`` / ``parent_program_id`` / ``parent_session_id``. Turns are
  ordered by ``request_received_ms`` (then file order), each turn's parent the previous
  one. A child chain has ``parent_session_id`` = its parent chain, and its first turn's
  parent is the latest request of the parent chain received at or before it (Dynamo's own
  rule when no tool evidence is given). A record without ``agent_context`` is its own
  session. A parent chain not in the file is dropped, with a warning; chains that are
  their own ancestors are an error;
* ``arrival_s`` = ``request_received_ms`` minus the earliest, in seconds; the epoch is the
  earliest (Unix ms, UTC). **Think time** = received minus the previous turn's
  completion: ``event_time_unix_ms``, else received + ``total_time_ms`` (0 when negative,
  counted; null when neither is given);
* ``input_length`` = ``replay.input_length``; ``output_length`` = ``output_tokens`` (0
  becomes 1, with a warning); ``block_size`` = ``trace_block_size``, one for the whole
  trace (a record with another is an error);
* **hashes are carried unchanged**: they are position-chained already and global (equal
  tokens, equal hashes across sessions). They are unsigned 64-bit: values past 2^63 are
  kept exactly (the column is ``uint64``); a value past 2^64 or negative is an error;
* lost: timing and cache measurements of the captured run (TTFT, ITL, ``kv_hit_rate``,
  worker placement), tool records, finish reasons.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pddbench.workloads.importers.blocks import nullable, think_times
from pddbench.workloads.importers.common import (
    MAX_UNIX_MS,
    HashColumn,
    ImportResult,
    check_block_count,
    fail,
    get_hash_ids,
    get_int,
    get_number,
    get_object,
    get_optional_number,
    get_str,
    json_lines,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.reconstruct import turns_by_session
from pddbench.workloads.traceio import build_table

SCHEMA = "dynamo.request.trace.v1"
REQUEST_END = "request_end"
CHAIN_KEYS = ("trajectory_id", "program_id", "session_id")
PARENT_KEYS = ("parent_trajectory_id", "parent_program_id", "parent_session_id")


def _record(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """The trace record, unwrapped from the file sink's ``{"timestamp", "event"}``."""
    if "schema" not in obj and isinstance(obj.get("event"), dict):
        obj = obj["event"]
    schema = obj.get("schema")
    if schema != SCHEMA:
        raise fail(where, f"field 'schema' must be {SCHEMA!r}, got {schema!r}")
    return obj


def _chain(context: dict[str, Any], keys: tuple[str, ...], where: str) -> str | None:
    for key in keys:
        value = context.get(key)
        if value is not None:
            if not isinstance(value, str) or not value.strip():
                raise fail(where, f"field 'agent_context.{key}' must be a non-empty string, "
                                  f"got {value!r}")
            return value
    return None


def import_dynamo(src: Path) -> ImportResult:
    """Read a Dynamo request-trace file (JSONL or JSONL.GZ); see the module docstring."""
    src = Path(src)
    ids: list[str] = []
    chains: list[str | None] = []
    parent_chains: list[str | None] = []
    received: list[float] = []
    done: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    where_of: list[str] = []
    hashes = HashColumn()
    seen: dict[str, str] = {}
    block: tuple[int, str] | None = None
    skipped = 0
    for where, obj in json_lines(src):
        record = _record(obj, where)
        if record.get("event_type") != REQUEST_END:
            skipped += 1
            continue
        request = get_object(record, "request", where)
        rid = get_str(request, "request_id", where)
        if rid in seen:
            raise fail(where, f"request_id {rid!r} already used at {seen[rid]}")
        seen[rid] = where
        at = get_number(request, "request_received_ms", where, maximum=MAX_UNIX_MS)
        replay = get_object(request, "replay", where)
        size = get_int(replay, "trace_block_size", where, minimum=1)
        if block is None:
            block = (size, where)
        elif size != block[0]:
            raise fail(where, f"trace_block_size {size} differs from {block[0]} at {block[1]} "
                              "(a trace has one block size)")
        length = get_int(replay, "input_length", where, minimum=1)
        values = get_hash_ids(replay, "input_sequence_hashes", where)
        check_block_count(len(values), length, size, where, key="input_sequence_hashes")
        end = get_optional_number(record, "event_time_unix_ms", where, maximum=MAX_UNIX_MS)
        if end is None:
            total = get_optional_number(request, "total_time_ms", where)
            end = np.nan if total is None else at + total
        context = record.get("agent_context")
        if context is not None and not isinstance(context, dict):
            raise fail(where, f"field 'agent_context' must be an object, got {context!r}")
        chain = _chain(context, CHAIN_KEYS, where) if context else None
        parent = _chain(context, PARENT_KEYS, where) if context else None
        if parent is not None and parent == chain:
            raise fail(where, f"agent_context names {chain!r} as its own parent")
        ids.append(rid)
        chains.append(chain)
        parent_chains.append(parent)
        received.append(at)
        done.append(end)
        inputs.append(length)
        outputs.append(get_int(request, "output_tokens", where))
        where_of.append(where)
        hashes.append(values)

    if not ids:
        raise fail(str(src), f"no {REQUEST_END} records ({skipped} other records)")
    assert block is not None
    warnings = [f"{skipped} record(s) other than {REQUEST_END} skipped"] if skipped else []
    n = len(ids)
    start = float(min(received))
    arrival = (np.asarray(received) - start) / 1000.0
    session = [c if c is not None else rid for c, rid in zip(chains, ids, strict=True)]
    codes, names = pd.factorize(pd.Series(session, dtype=object))
    turns = turns_by_session(codes, arrival)
    think, early = think_times(turns.previous, arrival, (np.asarray(done) - start) / 1000.0)
    if early:
        warnings.append(f"{early} request(s) received before the previous turn completed; "
                        "their think time is 0")
    parent_request = [ids[p] if p >= 0 else None for p in turns.previous.tolist()]
    parent_session: list[str | None] = [None] * n
    _link_children(names.tolist(), codes, parent_chains, turns.turn, arrival, turns.order,
                   ids, where_of, parent_request, parent_session, warnings)
    output_length, zero = lift_zero_outputs(outputs, lambda i: where_of[i])
    warnings.extend(zero)
    table = build_table(
        request_id=ids,
        session_id=session,
        turn_index=turns.turn,
        arrival_s=arrival,
        input_length=np.asarray(inputs, dtype=np.int32),
        output_length=output_length,
        block_size=block[0],
        block_hashes=hashes.to_arrow(),
        parent_request_id=parent_request,
        think_time_s=nullable(think),
        parent_session_id=parent_session,
    )
    source = source_record("dynamo", [src], {})
    source["hashes"] = "carried: Dynamo's sequence-aware 64-bit block hashes"
    epoch = datetime.fromtimestamp(start / 1000.0, tz=UTC).isoformat()
    return ImportResult(table=table, epoch=epoch, source=source, warnings=warnings)


def _link_children(
    names: list[str],
    codes: np.ndarray,
    parent_chains: list[str | None],
    turn: np.ndarray,
    arrival: np.ndarray,
    order: np.ndarray,
    ids: list[str],
    where_of: list[str],
    parent_request: list[str | None],
    parent_session: list[str | None],
    warnings: list[str],
) -> None:
    """Hang each child chain's first turn off the latest parent-chain request before it."""
    code_of = {name: k for k, name in enumerate(names)}
    parent_of: dict[int, int] = {}
    first_row: dict[int, int] = {}
    missing: list[int] = []
    for row in order.tolist():
        k = int(codes[row])
        if turn[row] == 0:
            first_row[k] = row
        name = parent_chains[row]
        if name is None or k in parent_of:
            continue
        if name in code_of:
            parent_of[k] = code_of[name]
        else:
            missing.append(row)
    if missing:
        warnings.append(f"{len(missing)} request(s) name a parent session not in the file; "
                        f"the link is dropped. First: {where_of[missing[0]]}")
    for k in parent_of:  # a chain that is its own ancestor
        seen = {k}
        up = parent_of.get(k)
        while up is not None:
            if up in seen:
                raise fail(where_of[first_row[k]],
                           f"session {names[k]!r} is its own ancestor through its parents")
            seen.add(up)
            up = parent_of.get(up)
    rows_of: dict[int, list[int]] = {}
    for row in order.tolist():
        rows_of.setdefault(int(codes[row]), []).append(row)
    for child, parent in parent_of.items():
        row = first_row[child]
        parent_session[row] = names[parent]
        before = [r for r in rows_of[parent] if arrival[r] <= arrival[row]]
        parent_request[row] = ids[before[-1]] if before else None
