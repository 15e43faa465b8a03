"""Importer for WEKA kv-cache-tester agentic traces (Claude Code conversations) → canonical trace.

Input: one JSON object per conversation (a file, or a directory of ``trace_*.json``):
``{id, block_size (64), hash_id_scope ("local"), requests: [...]}``. A request is
``{t, type, model, in, out, hash_ids, think_time, ...}`` with ``t`` in seconds from the
conversation's start and ``hash_ids`` the full 64-token blocks (``len == floor(in/64)``).

Sub-agents are entries of ``type == "subagent"`` *beside* the requests of the conversation
that spawned them: ``{t, duration_ms, agent_id, subagent_type, requests: [...]}``. In the
data their ``t`` is when the sub-agent *finished* (the list is ordered by ``t``), so it
starts at ``t - duration_ms/1000``; its own requests' ``t`` count from that start. Several
sub-agents may run in parallel from one spawning request. (Checked on the public corpus:
every sub-agent starts 0.5–1 s after the end, ``t + api_time``, of the last main request
before it.)

Mapping:

* one session per conversation: ``session_id`` = the conversation ``id`` (e.g.
  ``trace_0010``), ``request_id`` = ``<session>/rNNNN`` (turn index), turns in file order,
  each turn's parent = the previous turn (agentic turns re-send the history; a context
  compaction shortens the prompt but is still the next turn), ``agent_type`` = ``"main"``;
* each sub-agent becomes a child session ``<parent session>/sub<k>`` (k = 1, 2, ... in file
  order within its parent), ``parent_session_id`` = the parent session, ``agent_type`` =
  ``"subagent"``; its first turn's ``parent_request_id`` is the spawning request: the
  latest request of the parent session whose ``t`` is at or before the sub-agent's start
  (the start is clamped to not precede it). Nested sub-agents recurse the same way;
* ``think_time_s`` = the file's ``think_time`` (null when absent); model names, request
  ``type``, ``api_time`` and the sub-agent type are dropped; an ``out`` of 0 becomes 1
  (a replayed request generates at least one token), with a warning;
* **hashes** are per conversation (``hash_id_scope == "local"``), and sub-agents reuse
  their conversation's hash space (they share their own system prompt blocks with each
  other, none with the parent), so every id is namespaced by the *top-level* conversation
  id: ``uint64 = blake2b(conversation id NUL id)[:8]`` (see
  :func:`~.common.namespaced_hashes`). With scope ``"global"`` one namespace is used;
* ``block_size`` = the file's (64), or a coarser multiple ``k × 64`` given as an option:
  every k-th hash is kept (the hash of the last 64-block in each coarse block, which
  identifies the whole prefix up to there), ``hashes[k-1::k]`` of the full blocks,
  giving ``floor(in / (64k))`` blocks;
* **arrivals**: a conversation has no wall clock, so its start is chosen: sessions start
  in file-name order, the first at 0 s, then with gaps drawn from an exponential
  distribution of mean ``session_gap_s`` (``session_start="poisson"``, seeded by ``seed``,
  deterministic) or exactly ``session_gap_s`` apart (``"fixed"``); a gap of 0 starts them
  all together. ``arrival_s`` = conversation start + offset within the conversation.
  Rows are sorted by arrival (stable). No epoch.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pddbench.errors import UserError
from pddbench.workloads.importers.common import (
    HashColumn,
    ImportResult,
    check_block_count,
    check_block_size_option,
    check_input_file,
    fail,
    get_hash_ids,
    get_int,
    get_list,
    get_number,
    get_optional_number,
    lift_zero_outputs,
    namespaced_hashes,
    source_record,
)
from pddbench.workloads.traceio import build_table

SessionStart = Literal["poisson", "fixed"]
SESSION_STARTS: tuple[str, ...] = ("poisson", "fixed")
FILE_PATTERN = "trace_*.json"
SUBAGENT = "subagent"


@dataclass
class _Rows:
    """Columns being assembled; arrivals are relative to their conversation's start."""

    request_id: list[str] = field(default_factory=list)
    session_id: list[str] = field(default_factory=list)
    parent_request_id: list[str | None] = field(default_factory=list)
    parent_session_id: list[str | None] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    arrival_s: list[float] = field(default_factory=list)
    input_length: list[int] = field(default_factory=list)
    output_length: list[int] = field(default_factory=list)
    think_time_s: list[float | None] = field(default_factory=list)
    agent_type: list[str] = field(default_factory=list)
    conversation: list[int] = field(default_factory=list)
    location: list[str] = field(default_factory=list)
    hashes: HashColumn = field(default_factory=HashColumn)


@dataclass(frozen=True)
class _Conversation:
    """Where one conversation's rows and hash values lie in the assembled columns."""

    conversation_id: str
    namespace: str
    first_value: int
    end_value: int


@dataclass
class _Walker:
    """Walks one conversation file's request tree into rows."""

    index: int
    native_block_size: int
    keep_every: int
    rows: _Rows
    warnings: list[str]

    def session(
        self,
        entries: list[Any],
        where: str,
        session_id: str,
        start_s: float,
        first_parent: str | None,
        parent_session: str | None,
        agent_type: str,
    ) -> None:
        """Rows for the requests of one (sub-)session, then its sub-agents."""
        rows = self.rows
        turn_times: list[float] = []
        turn_ids: list[str] = []
        subagents: list[tuple[str, dict[str, Any]]] = []
        parent = first_parent
        for pos, entry in enumerate(entries):
            loc = f"{where}[{pos}]"
            if not isinstance(entry, dict):
                raise fail(loc, f"expected a JSON object, got {type(entry).__name__}")
            if entry.get("type") == SUBAGENT:
                subagents.append((loc, entry))
                continue
            t = get_number(entry, "t", loc)
            if turn_times and t < turn_times[-1]:
                raise fail(loc, f"'t' = {t:g} is before the previous request's {turn_times[-1]:g}")
            size = get_int(entry, "in", loc, minimum=1)
            ids = get_hash_ids(entry, "hash_ids", loc)
            check_block_count(len(ids), size, self.native_block_size, loc)
            turn = len(turn_ids)
            request_id = f"{session_id}/r{turn:04d}"
            rows.request_id.append(request_id)
            rows.session_id.append(session_id)
            rows.parent_request_id.append(parent)
            rows.parent_session_id.append(parent_session if turn == 0 else None)
            rows.turn_index.append(turn)
            rows.arrival_s.append(start_s + t)
            rows.input_length.append(size)
            rows.output_length.append(get_int(entry, "out", loc))
            rows.think_time_s.append(get_optional_number(entry, "think_time", loc))
            rows.agent_type.append(agent_type)
            rows.conversation.append(self.index)
            rows.location.append(loc)
            full = size // self.native_block_size
            k = self.keep_every
            rows.hashes.append(ids[k - 1 : full : k] if k > 1 or len(ids) != full else ids)
            turn_times.append(t)
            turn_ids.append(request_id)
            parent = request_id

        for k, (loc, entry) in enumerate(subagents, start=1):
            self._subagent(entry, loc, f"{session_id}/sub{k}", session_id, start_s,
                           turn_times, turn_ids)

    def _subagent(
        self,
        entry: dict[str, Any],
        loc: str,
        session_id: str,
        parent_session: str,
        parent_start_s: float,
        turn_times: list[float],
        turn_ids: list[str],
    ) -> None:
        finished = get_number(entry, "t", loc)
        requests = get_list(entry, "requests", loc)
        if not requests:
            self.warnings.append(f"{loc}: sub-agent has no requests; skipped")
            return
        duration_ms = get_optional_number(entry, "duration_ms", loc)
        if duration_ms is not None:
            start = finished - duration_ms / 1000.0
        else:
            last = requests[-1] if isinstance(requests[-1], dict) else {}
            last_t = get_optional_number(last, "t", f"{loc}.requests[{len(requests) - 1}]")
            api = get_optional_number(last, "api_time", f"{loc}.requests[{len(requests) - 1}]")
            start = finished - (last_t or 0.0) - (api or 0.0)
            self.warnings.append(
                f"{loc}: sub-agent has no 'duration_ms'; start estimated from its last request"
            )
        spawner = bisect.bisect_right(turn_times, start + 1e-9) - 1
        if spawner >= 0:
            start = max(start, turn_times[spawner])
            first_parent: str | None = turn_ids[spawner]
        else:
            first_parent = None
            start = max(start, 0.0)
            self.warnings.append(
                f"{loc}: sub-agent starts before any request of {parent_session}; "
                "its first turn has no parent request"
            )
        self.session(
            requests, f"{loc}.requests", session_id, parent_start_s + start,
            first_parent, parent_session, SUBAGENT,
        )


def _conversation_files(src: Path) -> list[Path]:
    if src.is_dir():
        files = sorted(src.glob(FILE_PATTERN))
        if not files:
            raise fail(str(src), f"no {FILE_PATTERN} files in this directory")
        return files
    return [check_input_file(src)]


def _load_json(path: Path) -> dict[str, Any]:
    check_input_file(path)
    try:
        with path.open("rb") as fh:
            obj = json.load(fh)
    except json.JSONDecodeError as exc:
        raise fail(f"{path}: line {exc.lineno}", f"not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise fail(str(path), "not valid JSON (not UTF-8)") from None
    except RecursionError:
        raise fail(str(path), "not valid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise fail(str(path), f"expected a JSON object, got {type(obj).__name__}")
    return obj


def session_starts(count: int, *, gap_s: float, policy: SessionStart, seed: int) -> np.ndarray:
    """Start offsets of ``count`` sessions: 0, then exponential (``poisson``) or fixed gaps."""
    if count <= 0:
        return np.zeros(0, dtype=np.float64)
    if policy == "poisson":
        gaps = np.random.default_rng(seed).exponential(gap_s, size=count - 1)
    else:
        gaps = np.full(count - 1, gap_s, dtype=np.float64)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def _check_options(block_size: int | None, gap_s: float, policy: str) -> None:
    if block_size is not None:
        check_block_size_option(block_size)
    if not np.isfinite(gap_s) or gap_s < 0:
        raise UserError(f"session gap must be a finite number >= 0, got {gap_s}")
    if policy not in SESSION_STARTS:
        raise UserError(f"session start must be one of {', '.join(SESSION_STARTS)}, got {policy!r}")


def import_weka(
    src: Path,
    *,
    block_size: int | None = None,
    session_gap_s: float = 60.0,
    session_start: SessionStart = "poisson",
    seed: int = 0,
) -> ImportResult:
    """Read WEKA conversation(s) from a file or directory; see the module docstring."""
    _check_options(block_size, session_gap_s, session_start)
    src = Path(src)
    if not src.exists():
        raise fail(str(src), "no such file or directory")
    files = _conversation_files(src)
    rows = _Rows()
    warnings: list[str] = []
    conversations: list[_Conversation] = []
    seen: dict[str, Path] = {}
    out_block_size: int | None = None

    for index, path in enumerate(files):
        obj = _load_json(path)
        where = str(path)
        conv_id = obj.get("id", path.stem)
        if not isinstance(conv_id, str) or not conv_id:
            raise fail(where, f"field 'id' must be a non-empty string, got {conv_id!r}")
        if conv_id in seen:
            raise fail(where, f"conversation id {conv_id!r} already used by {seen[conv_id]}")
        seen[conv_id] = path
        native = get_int(obj, "block_size", where, minimum=1)
        wanted = native if block_size is None else block_size
        if wanted % native:
            raise UserError(
                f"block size {wanted} is not a multiple of {path}'s block size {native}"
            )
        if out_block_size is not None and wanted != out_block_size:
            raise fail(where, f"block size {wanted} differs from the other files' {out_block_size}")
        out_block_size = wanted
        scope = obj.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise fail(where, f"field 'hash_id_scope' must be 'local' or 'global', got {scope!r}")
        first_value = rows.hashes.value_count
        walker = _Walker(index, native, wanted // native, rows, warnings)
        before = len(rows.request_id)
        walker.session(get_list(obj, "requests", where), f"{where}: requests", conv_id,
                       0.0, None, None, "main")
        if len(rows.request_id) == before:
            warnings.append(f"{where}: conversation {conv_id!r} has no requests")
        conversations.append(
            _Conversation(conv_id, conv_id if scope == "local" else "global",
                          first_value, rows.hashes.value_count)
        )

    if not rows.request_id:
        raise fail(str(src), "no requests in any conversation")

    local = rows.hashes.values()
    values = np.empty_like(local)
    for conv in conversations:
        span = slice(conv.first_value, conv.end_value)
        values[span] = namespaced_hashes(conv.namespace, local[span])
    starts = session_starts(len(files), gap_s=session_gap_s, policy=session_start, seed=seed)
    arrival = np.asarray(rows.arrival_s) + starts[np.asarray(rows.conversation)]
    order = np.argsort(arrival, kind="stable")
    output_length, zero_warnings = lift_zero_outputs(
        rows.output_length, lambda i: rows.location[i]
    )
    warnings.extend(zero_warnings)

    def pick(column: list[Any]) -> list[Any]:
        return [column[i] for i in order.tolist()]

    table = build_table(
        request_id=pick(rows.request_id),
        session_id=pick(rows.session_id),
        turn_index=np.asarray(rows.turn_index, dtype=np.int32)[order],
        arrival_s=arrival[order],
        input_length=np.asarray(rows.input_length, dtype=np.int32)[order],
        output_length=output_length[order],
        block_size=int(out_block_size or 0),
        block_hashes=rows.hashes.to_arrow(values, order),
        parent_request_id=pick(rows.parent_request_id),
        think_time_s=pick(rows.think_time_s),
        agent_type=pick(rows.agent_type),
        parent_session_id=pick(rows.parent_session_id),
    )
    options = {
        "block_size": out_block_size,
        "session_gap_s": session_gap_s,
        "session_start": session_start,
        "seed": seed,
    }
    source = source_record("weka", files, options)
    return ImportResult(table=table, epoch=None, source=source, warnings=warnings)
