"""Importer for Alibaba Bailian (Qwen) KVCache traces (JSONL) → canonical trace.

Reference: the dataset's README, https://github.com/alibaba-edu/qwen-bailian-usagetraces-anon
(files ``qwen_*_blksz_16.jsonl``). One JSON object per request::

    {"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 2, "hash_ids": [1089, 1090, ...]}

``timestamp`` is seconds from the trace start; ``parent_chat_id`` is -1 for a root
request; ``hash_ids`` are "salted SipHash blocks (16 tokens per block)", remapped to
sequential integers, and the last, partial block is hashed too
(``len == ceil(input_length / 16)``; a list of full blocks only is accepted as well).
Each row already holds its whole context: a follow-up's ``input_length`` and ``hash_ids``
cover the history it re-sends (AIPerf reads the trace the same way).

Mapping:

* ``request_id`` = ``bl-<chat_id>``; sessions follow the parent chain
  (:func:`~.reconstruct.chain_sessions`): a request continues its parent's session as the
  next turn; a second child of one parent (a regenerated or edited turn) starts a branch
  session with ``parent_session_id`` set, as Mooncake's forks do. ``session_id`` is the
  request id of the session's first turn. A ``parent_chat_id`` that is not in the file
  (the conversation began before the trace window) makes the request a root, with a
  warning; a parent chain that loops, or a parent that arrives after its child, is an
  error naming the line;
* ``arrival_s`` = ``timestamp`` (no epoch: the file has none); ``think_time_s`` null (a
  parent's completion time is not recorded);
* **hashes are rebuilt position-chained** (:func:`~.blocks.chain_hashes`): the README
  says each 16-token block is hashed, not that a block's id names its whole prefix, so
  value ``k`` mixes ids ``0..k``; equal values then mean equal prefixes whichever way the
  ids were made. The chain is seeded by the file's name (each file remaps its own hash
  domain, so two files' ids are unrelated). ``block_size`` = 16, the partial last block
  kept as the file has it;
* dropped: ``type`` (text / search / image / file), Bailian's own ``turn`` number (the
  chain gives the turn index), and ``chat_id`` itself beyond the request id; an
  ``output_length`` of 0 becomes 1, with a warning.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pddbench.workloads.importers.blocks import chain_hashes
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
from pddbench.workloads.importers.reconstruct import chain_sessions
from pddbench.workloads.traceio import build_table

BAILIAN_BLOCK_SIZE = 16
REQUEST_PREFIX = "bl-"
ROOT = -1
_MAX_CHAT_ID = 2**62


def import_bailian(src: Path) -> ImportResult:
    """Read a Bailian JSONL trace; see the module docstring."""
    src = Path(src)
    chat_ids: list[int] = []
    parents: list[int] = []
    arrival: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    where_of: list[str] = []
    hashes = HashColumn()
    row_of: dict[int, int] = {}

    for where, obj in json_lines(src):
        chat = get_int(obj, "chat_id", where, minimum=0, maximum=_MAX_CHAT_ID)
        if chat in row_of:
            raise fail(where, f"chat_id {chat} already used at {where_of[row_of[chat]]}")
        parent = get_int(obj, "parent_chat_id", where, minimum=ROOT, maximum=_MAX_CHAT_ID)
        if parent == chat:
            raise fail(where, f"parent_chat_id {parent} is the request's own chat_id")
        size = get_int(obj, "input_length", where, minimum=1)
        ids = get_hash_ids(obj, "hash_ids", where)
        check_block_count(len(ids), size, BAILIAN_BLOCK_SIZE, where)
        row_of[chat] = len(chat_ids)
        chat_ids.append(chat)
        parents.append(parent)
        arrival.append(get_number(obj, "timestamp", where))
        inputs.append(size)
        outputs.append(get_int(obj, "output_length", where))
        where_of.append(where)
        hashes.append(ids)

    n = len(chat_ids)
    if n == 0:
        raise fail(str(src), "no requests (only blank lines)")
    times = np.asarray(arrival, dtype=np.float64)
    continues, warnings = _parent_rows(chat_ids, parents, row_of, times, where_of)
    order = np.lexsort((np.arange(n), times)).tolist()
    links = chain_sessions(continues, order)

    output_length, zero_warnings = lift_zero_outputs(outputs, lambda i: where_of[i])
    warnings.extend(zero_warnings)
    values = chain_hashes(hashes.offsets(), hashes.values(), namespace=f"bailian:{src.name}")
    ids = np.array([f"{REQUEST_PREFIX}{c}" for c in chat_ids], dtype=object)
    table = build_table(
        request_id=ids.tolist(),
        session_id=ids[links.session_root].tolist(),
        turn_index=links.turn,
        arrival_s=times,
        input_length=np.asarray(inputs, dtype=np.int32),
        output_length=output_length,
        block_size=BAILIAN_BLOCK_SIZE,
        block_hashes=hashes.to_arrow(values),
        parent_request_id=[ids[p] if p >= 0 else None for p in links.parent.tolist()],
        parent_session_id=[
            ids[p] if p >= 0 else None for p in links.parent_session_root.tolist()
        ],
    )
    source = source_record("bailian", [src], {})
    source["sessions"] = {"count": links.num_sessions, "forks": links.num_forks}
    source["hashes"] = "rebuilt: per-block ids chained by position"
    return ImportResult(table=table, epoch=None, source=source, warnings=warnings)


def _parent_rows(
    chat_ids: list[int],
    parents: list[int],
    row_of: dict[int, int], times: np.ndarray, where_of: list[str]
) -> tuple[list[int], list[str]]:
    """Row of each request's parent (-1: root or parent not in the file); loops and
    parents arriving after their child are one-line errors."""
    continues = [row_of.get(p, -1) if p != ROOT else -1 for p in parents]
    missing = [i for i, p in enumerate(parents) if p != ROOT and continues[i] < 0]
    warnings = []
    if missing:
        first = missing[0]
        warnings.append(
            f"{len(missing)} request(s) name a parent_chat_id not in the file (the "
            f"conversation began before the trace); they start sessions. First: "
            f"{where_of[first]}: parent_chat_id {parents[first]}"
        )
    state = [0] * len(continues)  # 0 unseen, 1 on the current walk, 2 known to end
    for start in range(len(continues)):
        walk: list[int] = []
        row = start
        while row >= 0 and state[row] == 0:
            state[row] = 1
            walk.append(row)
            row = continues[row]
        if row >= 0 and state[row] == 1:
            loop = walk[walk.index(row):]
            names = " -> ".join(str(chat_ids[r]) for r in [*loop, row])
            raise fail(where_of[row], f"parent_chat_id chain is a loop (chat {names})")
        for r in walk:
            state[r] = 2
    for row, parent in enumerate(continues):
        if parent >= 0 and times[parent] > times[row]:
            raise fail(
                where_of[row],
                f"parent_chat_id {parents[row]} arrives at {times[parent]:g} s, after this "
                f"request ({times[row]:g} s)",
            )
    return continues, warnings
