"""Importer for TraceLab agentic-coding traces (JSONL, optionally gzipped) → canonical trace.

References: the corpus, https://github.com/uw-syfi/TraceLab (release asset
``syfi_coding_trace.jsonl.gz``), and AIPerf's reader of it
(``aiperf/dataset/loader/tracelab_trace.py``, ``_tracelab_convert.py``). One JSON object
per LLM round::

    {"provider": "claude", "session_id": "claude:…", "round_index": 3, "model": "…",
     "input_tokens_total": 30512, "prefix_tokens": 29870, "newly_append_tokens": 642,
     "output_tokens": 211, "reasoning_output_tokens": null,
     "timing_events": [{"event_type": "tool_result", "timestamp": "2026-01-01T00:00:03Z"},
                       {"event_type": "text", "timestamp": "2026-01-01T00:00:04Z"}],
     "tools": [{"tool_name": "Bash", "emitted_at": "…", "result_at": "…",
                "tool_wall_latency_ms": 412}]}

``input_tokens_total = prefix_tokens + newly_append_tokens``, the engine's split of the
round's input into what was already cached and what was new.

Mapping:

* ``request_id`` = ``tl-NNNNNN`` (kept rounds in file order); ``session_id`` = the
  round's ``session_id``; turns ordered by submission time, then ``round_index``, then
  file order; each turn's parent the previous turn;
* **times**: a round is *submitted* at its latest input event (``user_message`` /
  ``tool_result``; the earliest output event when it has no input event) and *done* at
  its latest output event (``text`` / ``reasoning`` / ``tool_call``). ``arrival_s`` =
  submission minus the earliest submission; the epoch is that earliest submission (UTC;
  a time without a zone is taken as UTC). A round without timing events cannot be placed
  and is dropped, with a count;
* **think time** = submission minus the previous round's done time (0 when negative,
  counted). When the previous round has no output event, its tool latencies stand in:
  the longest ``tool_wall_latency_ms`` (parallel tools overlap);
* ``input_length`` = ``input_tokens_total``; ``output_length`` = ``output_tokens`` +
  ``reasoning_output_tokens`` (reasoning is generated too); 0 becomes 1, with a warning;
* **prefix blocks are rebuilt from ``prefix_tokens``** (:func:`~.blocks.inherited_blocks`):
  a round's first ``prefix_tokens // block_size`` full blocks are the previous round's,
  the rest fresh (full blocks only: ``floor(input / block_size)``, as AIPerf does).
  TraceLab has no content hashes, so a prefix shared *across* sessions is not seen.
  ``block_size`` is a choice (64 by default);
* lost: sub-agent nesting (a sub-agent is its own session with no link in the row;
  AIPerf guesses it by timing containment, this importer does not), model, provider,
  user, project and tool names.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pddbench.workloads.importers.blocks import inherited_blocks, nullable, think_times
from pddbench.workloads.importers.common import (
    ImportResult,
    check_block_size_option,
    fail,
    get_int,
    get_list,
    get_number,
    get_str,
    json_lines,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.reconstruct import turns_by_session
from pddbench.workloads.traceio import build_table, hashes_from_flat

TRACELAB_BLOCK_SIZE = 64
TRACELAB_HASH_BASE = 0x7C << 56
REQUEST_PREFIX = "tl-"
INPUT_EVENTS = frozenset({"user_message", "tool_result"})
OUTPUT_EVENTS = frozenset({"text", "reasoning", "tool_call"})
_YEARS = (1970, 9000)


def parse_time(value: object, where: str, key: str) -> float:
    """An ISO-8601 date-time (``Z`` or an offset; none means UTC) as Unix seconds."""
    if not isinstance(value, str):
        raise fail(where, f"field {key!r} must be an ISO-8601 date-time string, got {value!r}")
    try:
        stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise fail(where, f"field {key!r} {value[:60]!r} is not an ISO-8601 date-time") from None
    if not _YEARS[0] <= stamp.year < _YEARS[1]:
        raise fail(where, f"field {key!r} {value[:60]!r} is out of range (years 1970-8999)")
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _round_times(row: dict[str, Any], where: str) -> tuple[float | None, float | None]:
    """(submitted, done) in Unix seconds; ``None`` when the round has no such event."""
    inputs: list[float] = []
    outputs: list[float] = []
    for k, event in enumerate(row.get("timing_events") or []):
        loc = f"{where}: timing_events[{k}]"
        if not isinstance(event, dict):
            raise fail(loc, f"expected a JSON object, got {type(event).__name__}")
        kind = event.get("event_type")
        if kind in INPUT_EVENTS or kind in OUTPUT_EVENTS:
            t = parse_time(event.get("timestamp"), loc, "timestamp")
            (inputs if kind in INPUT_EVENTS else outputs).append(t)
    if not inputs and not outputs:
        return None, None
    submitted = max(inputs) if inputs else min(outputs)
    return submitted, (max(outputs) if outputs else None)


def _tool_seconds(row: dict[str, Any], where: str) -> float:
    """The longest tool wall latency of a round, in seconds (NaN when none is given)."""
    longest = np.nan
    for k, tool in enumerate(row.get("tools") or []):
        if isinstance(tool, dict) and tool.get("tool_wall_latency_ms") is not None:
            ms = get_number(tool, "tool_wall_latency_ms", f"{where}: tools[{k}]")
            longest = ms / 1000.0 if np.isnan(longest) else max(longest, ms / 1000.0)
    return longest


def import_tracelab(src: Path, *, block_size: int = TRACELAB_BLOCK_SIZE) -> ImportResult:
    """Read a TraceLab JSONL(.gz) corpus; see the module docstring."""
    check_block_size_option(block_size)
    src = Path(src)
    sessions: list[str] = []
    rounds: list[int] = []
    submitted: list[float] = []
    done: list[float] = []
    tools: list[float] = []
    inputs: list[int] = []
    prefix: list[int] = []
    outputs: list[int] = []
    where_of: list[str] = []
    undated = 0
    split_off = 0
    for where, row in json_lines(src):
        session = get_str(row, "session_id", where)
        if not session.strip():
            raise fail(where, "field 'session_id' is empty")
        total = get_int(row, "input_tokens_total", where, minimum=1)
        cached = get_int(row, "prefix_tokens", where) if row.get("prefix_tokens") is not None else 0
        new = row.get("newly_append_tokens")
        if cached > total:
            raise fail(where, f"prefix_tokens {cached} exceed input_tokens_total {total}")
        if new is not None and get_int(row, "newly_append_tokens", where) + cached != total:
            split_off += 1
        reasoning = (get_int(row, "reasoning_output_tokens", where)
                     if row.get("reasoning_output_tokens") is not None else 0)
        out = get_int(row, "output_tokens", where) + reasoning
        index = get_int(row, "round_index", where) if row.get("round_index") is not None else 0
        if row.get("timing_events") is not None:
            get_list(row, "timing_events", where)
        if row.get("tools") is not None:
            get_list(row, "tools", where)
        sent, finished = _round_times(row, where)
        if sent is None:
            undated += 1
            continue
        sessions.append(session)
        rounds.append(index)
        submitted.append(sent)
        done.append(np.nan if finished is None else finished)
        tools.append(_tool_seconds(row, where))
        inputs.append(total)
        prefix.append(cached)
        outputs.append(out)
        where_of.append(where)

    warnings: list[str] = []
    if undated:
        warnings.append(f"{undated} round(s) without timing events dropped (they cannot be placed)")
    if not sessions:
        raise fail(str(src), "no rounds with timing events")
    if split_off:
        warnings.append(
            f"{split_off} round(s) where prefix_tokens + newly_append_tokens != "
            "input_tokens_total; input_tokens_total and prefix_tokens were used"
        )
    n = len(sessions)
    sent_s = np.asarray(submitted, dtype=np.float64)
    start = float(sent_s.min())
    arrival = sent_s - start
    codes = pd.factorize(pd.Series(sessions, dtype=object))[0]
    turns = turns_by_session(codes, arrival, np.asarray(rounds))
    done_s = np.asarray(done, dtype=np.float64) - start
    fallback = np.isnan(done_s)
    done_s[fallback] = arrival[fallback] + 0.0  # the round's tools then start at once
    think, early = think_times(turns.previous, arrival, done_s)
    tool_think = np.asarray(tools)[np.maximum(turns.previous, 0)]
    use_tools = (turns.previous >= 0) & fallback[np.maximum(turns.previous, 0)]
    think[use_tools] = tool_think[use_tools]
    if early:
        warnings.append(f"{early} round(s) submitted before the previous round's last output; "
                        "their think time is 0")
    output_length, zero = lift_zero_outputs(outputs, lambda i: where_of[i])
    warnings.extend(zero)
    offsets, values = inherited_blocks(
        parent=turns.previous, turn=turns.turn, shared_tokens=np.asarray(prefix),
        input_length=np.asarray(inputs), block_size=block_size, base=TRACELAB_HASH_BASE,
    )
    width = max(6, len(str(n - 1)))
    ids = np.array([f"{REQUEST_PREFIX}{i:0{width}d}" for i in range(n)], dtype=object)
    table = build_table(
        request_id=ids.tolist(),
        session_id=sessions,
        turn_index=turns.turn,
        arrival_s=arrival,
        input_length=np.asarray(inputs, dtype=np.int32),
        output_length=output_length,
        block_size=block_size,
        block_hashes=hashes_from_flat(offsets, values),
        parent_request_id=[ids[p] if p >= 0 else None for p in turns.previous.tolist()],
        think_time_s=nullable(think),
    )
    source = source_record("tracelab", [src], {"block_size": block_size})
    source["hashes"] = "rebuilt from prefix_tokens (the previous round's blocks), rest fresh"
    epoch = datetime.fromtimestamp(start, tz=UTC).isoformat()
    return ImportResult(table=table, epoch=epoch, source=source, warnings=warnings)
