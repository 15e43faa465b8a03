"""Importer for BurstGPT traces (CSV, v1 and v2 with sessions) → canonical trace.

References: the dataset's README and releases, https://github.com/HPMLL/BurstGPT. v1
(``BurstGPT_1.csv``, ``_2``; release v1.1) has the columns ``Timestamp, Model, Request
tokens, Response tokens, Total tokens, Log Type``, e.g. ``5,ChatGPT,472,18,490,Conversation
log``; v2 (``BurstGPT_3.csv``, release v2.0) adds ``Session ID`` and ``Elapsed time``
after ``Timestamp``, e.g. ``19440110.0,1722ac82-0a46-4bf0-aa08-89794e7a2b3f,43,GPT-4,906,
446,1352,Conversation log``. ``Timestamp`` is in seconds (v2's do not start at 0);
``Response tokens`` = 0 marks a failed request. Columns are found by header name.

Mapping:

* ``request_id`` = ``bg-NNNNNN`` (0-based data row of the kept rows); ``arrival_s`` =
  ``Timestamp`` minus the earliest (no epoch: the file has no wall-clock time);
* **sessions**: v2 rows with one ``Session ID`` are one session (``session_id`` = that
  id), turns ordered by ``Timestamp`` then file order, each turn's parent the previous
  turn; a row without one, and every v1 row, is its own session. (AIPerf's loader makes
  every row its own request, losing v2's sessions.)
* **think time** (v2): ``Elapsed time`` is not defined in the README; it is read as the
  request's duration in seconds, so a turn's think time is its arrival minus the
  previous turn's arrival plus elapsed time (0 when that is negative, counted in a
  warning). v1: null;
* **failed requests** (``Response tokens`` = 0): dropped and counted (``failed="drop"``,
  the default), or kept with an output length of 1 (``"keep"``), with a warning either way;
* **prefix hashes: the format has none.** ``prefix="history"`` (the default) states a
  synthetic model: a session's turn is taken to re-send the previous turn's prompt, so it
  inherits the previous turn's full blocks (:func:`~.blocks.inherited_blocks` with
  shared tokens = the previous ``Request tokens``), the rest fresh. ``prefix="none"``:
  every block fresh, no hits. Either way the hit rates are not measured ones; the source
  record's ``hashes`` says which model produced them. ``block_size`` (64 by default) is
  a choice, not the format's;
* dropped: ``Model``, ``Total tokens``, ``Log Type``.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from pddbench.errors import UserError
from pddbench.workloads.importers.blocks import inherited_blocks, nullable, think_times
from pddbench.workloads.importers.common import (
    ImportResult,
    check_block_size_option,
    check_input_file,
    fail,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.csvtable import integers, line, numbers, read_csv
from pddbench.workloads.importers.reconstruct import turns_by_session
from pddbench.workloads.traceio import build_table, hashes_from_flat

BURSTGPT_BLOCK_SIZE = 64
BURSTGPT_HASH_BASE = 0xB6 << 56
REQUEST_PREFIX = "bg-"
TIMESTAMP = "Timestamp"
REQUEST_TOKENS = "Request tokens"
RESPONSE_TOKENS = "Response tokens"
SESSION_ID = "Session ID"
ELAPSED = "Elapsed time"
FailedPolicy = Literal["drop", "keep"]
PrefixModel = Literal["history", "none"]
FAILED_POLICIES: tuple[str, ...] = ("drop", "keep")
PREFIX_MODELS: tuple[str, ...] = ("history", "none")


def import_burstgpt(
    src: Path,
    *,
    block_size: int = BURSTGPT_BLOCK_SIZE,
    failed: FailedPolicy = "drop",
    prefix: PrefixModel = "history",
) -> ImportResult:
    """Read a BurstGPT CSV (v1 or v2); see the module docstring."""
    check_block_size_option(block_size)
    if failed not in FAILED_POLICIES:
        raise UserError(f"failed must be one of {', '.join(FAILED_POLICIES)}, got {failed!r}")
    if prefix not in PREFIX_MODELS:
        raise UserError(f"prefix must be one of {', '.join(PREFIX_MODELS)}, got {prefix!r}")
    src = check_input_file(Path(src))
    frame = read_csv(src, (TIMESTAMP, REQUEST_TOKENS, RESPONSE_TOKENS))
    if frame.empty:
        raise fail(str(src), "no requests (header only)")
    version = 2 if SESSION_ID in frame.columns else 1
    if version == 2 and ELAPSED not in frame.columns:
        raise fail(str(src), f"line 1: has {SESSION_ID!r} but not {ELAPSED!r} (BurstGPT v2)")
    stamps = numbers(src, frame, TIMESTAMP)
    inputs = integers(src, frame, REQUEST_TOKENS, minimum=1)
    outputs = integers(src, frame, RESPONSE_TOKENS, minimum=0)
    elapsed = numbers(src, frame, ELAPSED) if version == 2 else None

    warnings: list[str] = []
    def where(i: int) -> str:
        return f"{src}: line {line(frame.index[i])}"

    keep = np.ones(len(frame), dtype=bool)
    zero = outputs == 0
    if failed == "drop" and zero.any():
        keep = ~zero
        warnings.append(
            f"{int(zero.sum())} failed request(s) (Response tokens 0) dropped; first: "
            f"{where(int(np.flatnonzero(zero)[0]))}"
        )
        if not keep.any():
            raise fail(str(src), "no requests left: every row is a failed request")
    rows = np.flatnonzero(keep)
    output_length, zero_warnings = lift_zero_outputs(outputs[rows], lambda i: where(int(rows[i])))
    warnings.extend(zero_warnings)
    n = rows.size
    width = max(6, len(str(n - 1)))
    ids = np.array([f"{REQUEST_PREFIX}{i:0{width}d}" for i in range(n)], dtype=object)
    arrival = stamps[rows] - stamps[rows].min()

    if version == 2:
        raw = frame[SESSION_ID].iloc[rows].fillna("").str.strip().to_numpy(dtype=object)
        named = raw != ""
        session = np.where(named, raw, ids)
    else:
        session = ids
    codes = pd.factorize(pd.Series(session, dtype=object))[0]
    turns = turns_by_session(codes, arrival)
    previous = turns.previous
    if elapsed is not None:
        think, early = think_times(previous, arrival, arrival + elapsed[rows])
        if early:
            warnings.append(
                f"{early} turn(s) arrive before the previous turn's Timestamp + Elapsed time; "
                "their think time is 0"
            )
    else:
        think = np.full(n, np.nan)
    shared = inputs[rows][np.maximum(previous, 0)] if prefix == "history" else np.zeros(n)
    shared = np.where(previous >= 0, shared, 0)
    offsets, values = inherited_blocks(
        parent=previous, turn=turns.turn, shared_tokens=shared, input_length=inputs[rows],
        block_size=block_size, base=BURSTGPT_HASH_BASE,
    )
    hashes_note = (
        "synthetic (history model): a turn re-sends the previous turn's prompt"
        if prefix == "history" else "synthetic (none): every block fresh, no prefix hits"
    )
    warnings.append(f"BurstGPT has no prefix hashes; hit rates come from a {hashes_note}")

    table = build_table(
        request_id=ids.tolist(),
        session_id=session.tolist(),
        turn_index=turns.turn,
        arrival_s=arrival,
        input_length=inputs[rows],
        output_length=output_length,
        block_size=block_size,
        block_hashes=hashes_from_flat(offsets, values),
        parent_request_id=[ids[p] if p >= 0 else None for p in previous.tolist()],
        think_time_s=nullable(think),
    )
    options = {"block_size": block_size, "failed": failed, "prefix": prefix}
    source = source_record("burstgpt", [src], options)
    source.update(version=version, hashes=hashes_note, failed_requests=int(zero.sum()))
    return ImportResult(table=table, epoch=None, source=source, warnings=warnings)
