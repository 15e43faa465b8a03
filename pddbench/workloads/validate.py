"""Trace validation: does a table read from a file hold a well-formed canonical trace?
(Over 500 lines for one reason: conforming and every row check of one trace, read in one pass.)

Two steps, both pure (no I/O; ``traceio.read_trace`` calls them):

* :func:`conform_table` checks the *columns*: required ones present, types equal to the
  canonical :data:`~pddbench.workloads.schema.TRACE_SCHEMA` or safely castable to it
  (any integer width for integer columns, integers or any float width for float columns,
  large/view/dictionary strings or integers for id columns, any list flavour of
  integers for ``block_hashes``), optional ones filled with nulls, extra columns
  dropped silently, column order made canonical.
* :func:`validate_table` checks the *rows* of a canonical table, vectorised over whole
  columns (a million rows and 10^8 hashes take a few seconds).

Every problem is one line. Row problems read ``FILE: row N: FIELD: message`` with ``N``
the 0-based row index in file order; column problems read ``FILE: column FIELD: message``
or ``FILE: missing required column FIELD (TYPE)``. This module must not read files,
print, or raise for bad input: it returns the lines and the caller decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.workloads.schema import REQUIRED_COLUMNS, TRACE_SCHEMA, Col

# --------------------------------------------------------------------------- columns


def _type_name(typ: pa.DataType) -> str:
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        kind = str(typ).split("<", 1)[0]
        return f"{kind}<{_type_name(typ.value_type)}>"
    return str(typ)


def _is_stringlike(typ: pa.DataType) -> bool:
    return (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_string_view(typ)
    )


def _is_listlike(typ: pa.DataType) -> bool:
    return (
        pa.types.is_list(typ)
        or pa.types.is_large_list(typ)
        or pa.types.is_fixed_size_list(typ)
        or pa.types.is_list_view(typ)
        or pa.types.is_large_list_view(typ)
    )


def _castable(actual: pa.DataType, target: pa.DataType) -> bool:
    """Whether ``actual`` may be cast to ``target`` without changing any meaning."""
    if pa.types.is_null(actual):
        return True
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    if _is_stringlike(target):
        return _is_stringlike(actual) or pa.types.is_integer(actual)
    if pa.types.is_integer(target):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(target):
        return pa.types.is_floating(actual) or pa.types.is_integer(actual)
    if pa.types.is_list(target):
        return _is_listlike(actual) and (
            pa.types.is_integer(actual.value_type) or pa.types.is_null(actual.value_type)
        )
    return False


def _integer_values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, row of each value) of an integer column or list-of-integer column."""
    values: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    start = 0
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_decode()
        if _is_listlike(chunk.type):
            parent = pc.list_parent_indices(chunk).to_numpy().astype(np.int64)
            flat = pc.list_flatten(chunk)
        else:
            parent = np.arange(len(chunk), dtype=np.int64)
            flat = chunk
        valid = pc.is_valid(flat).to_numpy(zero_copy_only=False)
        values.append(flat.to_numpy(zero_copy_only=False)[valid])
        rows.append(parent[valid] + start)
        start += len(chunk)
    if not values:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(values), np.concatenate(rows)


def _out_of_range_line(
    column: pa.ChunkedArray, target: pa.DataType, name: str, file: str
) -> str | None:
    """A row-level line for the first integer that does not fit ``target``, if any."""
    target_int = target.value_type if pa.types.is_list(target) else target
    if not pa.types.is_integer(target_int):
        return None
    try:
        values, rows = _integer_values(column)
    except (pa.ArrowException, ValueError, TypeError):
        return None
    if values.dtype.kind not in "iu":
        return None
    src, dst = np.iinfo(values.dtype), np.iinfo(target_int.to_pandas_dtype())
    low, high = max(src.min, dst.min), min(src.max, dst.max)
    bad = np.flatnonzero(
        (values < np.array(low, dtype=values.dtype)) | (values > np.array(high, dtype=values.dtype))
    )
    if bad.size == 0:
        return None
    first = int(bad[0])
    n_rows = np.unique(rows[bad]).size
    more = f" (and {n_rows - 1} more rows)" if n_rows > 1 else ""
    return (
        f"{file}: row {int(rows[first])}: {name}: value {int(values[first])} does not fit "
        f"{_type_name(target_int)}{more}"
    )


def _conform_column(
    column: pa.ChunkedArray, field: pa.Field, file: str
) -> tuple[pa.ChunkedArray | None, str | None]:
    actual, target = column.type, field.type
    if actual == target:
        return column, None
    if not _castable(actual, target):
        return None, (
            f"{file}: column {field.name}: expected {_type_name(target)}, "
            f"got {_type_name(actual)}"
        )
    try:
        return column.cast(target, safe=True), None
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        line = _out_of_range_line(column, target, field.name, file)
        if line is None:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            line = (
                f"{file}: column {field.name}: cannot convert {_type_name(actual)} to "
                f"{_type_name(target)} ({reason})"
            )
        return None, line


def conform_table(raw: pa.Table, *, file: str) -> tuple[pa.Table, list[str]]:
    """The canonical-schema table of ``raw`` and one line per column problem.

    Columns come out in ``TRACE_SCHEMA`` order; absent optional columns are all-null;
    extra columns are dropped without comment. A column with a problem comes out all
    null, so the table is only meaningful when the problem list is empty.
    """
    problems: list[str] = []
    arrays: list[pa.ChunkedArray] = []
    n = raw.num_rows
    for field in TRACE_SCHEMA:
        indices = raw.schema.get_all_field_indices(field.name)
        conformed: pa.ChunkedArray | None = None
        if not indices:
            if field.name in REQUIRED_COLUMNS:
                problems.append(
                    f"{file}: missing required column {field.name} ({_type_name(field.type)})"
                )
        elif len(indices) > 1:
            problems.append(f"{file}: column {field.name}: appears {len(indices)} times")
        else:
            conformed, problem = _conform_column(raw.column(indices[0]), field, file)
            if problem is not None:
                problems.append(problem)
        if conformed is None:
            conformed = pa.chunked_array([pa.nulls(n, type=field.type)], type=field.type)
        arrays.append(conformed)
    schema = TRACE_SCHEMA.with_metadata(raw.schema.metadata)
    return pa.Table.from_arrays(arrays, schema=schema), problems


# ------------------------------------------------------------------------------ rows


@dataclass(frozen=True)
class _Finding:
    """Rows that break one rule, and how to describe the rule for one of them."""

    field: str
    rows: np.ndarray  # int64 row indices, any order
    describe: Callable[[int], str]
    # the column the description reads, when it reads only that: a rule broken by every
    # row with one value there is a trace-wide problem, reported once (see ``_lines``)
    values: np.ndarray | None = None


def _ints(column: pa.ChunkedArray, fill: int) -> np.ndarray:
    return pc.fill_null(column, fill).to_numpy().astype(np.int64)


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).astype(np.float64)  # null -> NaN


def _null_mask(column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count == 0:
        return np.zeros(len(column), dtype=bool)
    return pc.is_null(column).to_numpy(zero_copy_only=False)


def _codes(array: pa.Array, value_set: pa.Array) -> np.ndarray:
    """Position of each value in ``value_set``; -1 for nulls and values not in it."""
    return pc.fill_null(pc.index_in(array, value_set=value_set), -1).to_numpy().astype(np.int64)


def _take(values: np.ndarray, index: np.ndarray, fill: int) -> np.ndarray:
    """``values[index]`` where ``index >= 0``, else ``fill``."""
    out = np.full(index.shape, fill, dtype=np.int64)
    ok = index >= 0
    out[ok] = values[index[ok]]
    return out


def _plain(array: pa.ChunkedArray) -> pa.Array:
    combined = array.combine_chunks()
    return combined if isinstance(combined, pa.Array) else pa.array([], type=array.type)


class _Rows:
    """The columns of a canonical table as numpy arrays, plus id factorisations."""

    def __init__(self, table: pa.Table):
        self.n = table.num_rows
        self.request_id = _plain(table.column(Col.REQUEST_ID))
        self.session_id = _plain(table.column(Col.SESSION_ID))
        self.parent_id = _plain(table.column(Col.PARENT_REQUEST_ID))
        self.parent_session = _plain(table.column(Col.PARENT_SESSION_ID))
        self.turn = _ints(table.column(Col.TURN_INDEX), 0)
        self.turn_null = _null_mask(table.column(Col.TURN_INDEX))
        self.arrival = _floats(table.column(Col.ARRIVAL))
        self.arrival_null = _null_mask(table.column(Col.ARRIVAL))
        self.input_length = _ints(table.column(Col.INPUT_LENGTH), 1)
        self.output_length = _ints(table.column(Col.OUTPUT_LENGTH), 1)
        self.block_size = _ints(table.column(Col.BLOCK_SIZE), 1)
        hashes = table.column(Col.BLOCK_HASHES)
        self.hashes = hashes
        self.hash_count = _ints(pc.list_value_length(hashes), -1)
        self.think = _floats(table.column(Col.THINK_TIME))
        self.think_null = _null_mask(table.column(Col.THINK_TIME))

        rid = pc.dictionary_encode(self.request_id)
        self.rid_values: pa.Array = rid.dictionary
        self.rid_code = pc.fill_null(rid.indices, -1).to_numpy().astype(np.int64)
        valid = self.rid_code >= 0
        self.rid_count = np.bincount(self.rid_code[valid], minlength=len(self.rid_values))
        codes, first = np.unique(self.rid_code, return_index=True)
        self.first_row_of_rid = np.full(len(self.rid_values), -1, dtype=np.int64)
        self.first_row_of_rid[codes[codes >= 0]] = first[codes >= 0]

        sid = pc.dictionary_encode(self.session_id)
        self.sid_values: pa.Array = sid.dictionary
        self.sid_code = pc.fill_null(sid.indices, -1).to_numpy().astype(np.int64)

        pcode = _codes(self.parent_id, self.rid_values)
        self.parent_row = _take(self.first_row_of_rid, pcode, -1)
        self.parent_null = _null_mask(table.column(Col.PARENT_REQUEST_ID))
        self.psid_code = _codes(self.parent_session, self.sid_values)
        self.psid_null = _null_mask(table.column(Col.PARENT_SESSION_ID))

    def rid(self, row: int) -> str:
        return repr(self.request_id[row].as_py())

    def sid(self, row: int) -> str:
        return repr(self.session_id[row].as_py())

    def parent(self, row: int) -> str:
        return repr(self.parent_id[row].as_py())


def _null_findings(table: pa.Table) -> list[_Finding]:
    found = []
    for field in TRACE_SCHEMA:
        if field.nullable:
            continue
        mask = _null_mask(table.column(field.name))
        if mask.any():
            found.append(_Finding(field.name, np.flatnonzero(mask), lambda _r: "missing (null)"))
    return found


def _adder(
    found: list[_Finding],
) -> Callable[[str, np.ndarray, Callable[[int], str], np.ndarray | None], None]:
    def add(
        field: str, mask: np.ndarray, describe: Callable[[int], str],
        values: np.ndarray | None = None,
    ) -> None:
        if mask.any():
            found.append(_Finding(field, np.flatnonzero(mask), describe, values))

    return add


def _number_findings(r: _Rows) -> list[_Finding]:
    f: list[_Finding] = []
    add = _adder(f)
    arrival_bad = ~np.isfinite(r.arrival) & ~r.arrival_null
    add(Col.ARRIVAL, arrival_bad, lambda i: f"{r.arrival[i]} is not a finite number", None)
    add(Col.ARRIVAL, r.arrival < 0, lambda i: f"{r.arrival[i]:g} is negative", r.arrival)
    think_bad = ~np.isfinite(r.think) & ~r.think_null
    add(Col.THINK_TIME, think_bad, lambda i: f"{r.think[i]} is not a finite number", None)
    add(Col.THINK_TIME, r.think < 0, lambda i: f"{r.think[i]:g} is negative", r.think)
    add(Col.TURN_INDEX, r.turn < 0, lambda i: f"{r.turn[i]} is negative", r.turn)
    for name, values in (
        (Col.INPUT_LENGTH, r.input_length),
        (Col.OUTPUT_LENGTH, r.output_length),
        (Col.BLOCK_SIZE, r.block_size),
    ):
        add(name, values <= 0, lambda i, v=values: f"{v[i]} is not positive", values)
    return f


# Limits of what a replay can run (the materialiser builds every prompt as token ids):
# a prompt or an output beyond 1 Mi tokens is past every model's context and would
# allocate gigabytes per request; a block must hold the digits that keep prompts of
# different hashes apart (materialize.Materializer) at the default client vocabulary
# (32000 ids from 1000 on: 5 tokens; a smaller vocabulary is checked when it is used);
# a session starting decades into the trace is a unit error, not a schedule.
MAX_TOKENS = 1 << 20
MAX_BLOCK_SIZE = 1 << 16
MIN_BLOCK_SIZE = 5
MAX_ID_CHARS = 256
MAX_ARRIVAL_S = 1e9  # 31 years of trace
_ID_ALLOWED = r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$"  # printable ASCII, no edge blanks


def block_size_problem(block_size: int) -> str | None:
    """Why a replay cannot run blocks of ``block_size`` tokens, or ``None`` if it can.

    The one statement of the rule: trace validation applies it to every row, and the
    commands that write traces (``trace synth``, ``trace import``) refuse such an option
    before they write anything."""
    if block_size <= 0:
        return f"{block_size} is not positive"
    if block_size < MIN_BLOCK_SIZE:
        return (f"{block_size} is below the {MIN_BLOCK_SIZE} tokens a block needs to keep "
                "prompts of different hashes apart")
    if block_size > MAX_BLOCK_SIZE:
        return f"{block_size} is above the limit of {MAX_BLOCK_SIZE}"
    return None


def _limit_findings(r: _Rows) -> list[_Finding]:
    f: list[_Finding] = []
    add = _adder(f)
    for name, values in ((Col.INPUT_LENGTH, r.input_length), (Col.OUTPUT_LENGTH, r.output_length)):
        add(name, values > MAX_TOKENS,
            lambda i, v=values: f"{v[i]} is more than the {MAX_TOKENS} tokens a replay sends",
            values)
    add(Col.ARRIVAL, r.arrival > MAX_ARRIVAL_S,
        lambda i: f"{r.arrival[i]:g} s is past the replay's limit of {MAX_ARRIVAL_S:g} s",
        None)
    bs = r.block_size
    add(Col.BLOCK_SIZE, (bs > 0) & ((bs < MIN_BLOCK_SIZE) | (bs > MAX_BLOCK_SIZE)),
        lambda i: str(block_size_problem(int(bs[i]))), bs)
    ids = pc.fill_null(r.request_id, "x")
    bad = ~pc.match_substring_regex(ids, _ID_ALLOWED).to_numpy(zero_copy_only=False)
    bad |= pc.utf8_length(ids).to_numpy(zero_copy_only=False) > MAX_ID_CHARS
    add(Col.REQUEST_ID, bad,
        lambda i: f"{r.rid(i)} is not 1-{MAX_ID_CHARS} printable ASCII characters "
        "(it travels in the X-Request-Id header)", None)
    return f


def _hash_findings(r: _Rows) -> list[_Finding]:
    f: list[_Finding] = []
    checkable = (r.hash_count >= 0) & (r.input_length > 0) & (r.block_size > 0)
    bs = np.maximum(r.block_size, 1)
    floor = r.input_length // bs
    ceil = -(-r.input_length // bs)
    bad = checkable & (r.hash_count != floor) & (r.hash_count != ceil)

    def describe(i: int) -> str:
        want = f"{floor[i]}" if floor[i] == ceil[i] else f"{floor[i]} or {ceil[i]}"
        return (
            f"{r.hash_count[i]} hashes for input_length {r.input_length[i]} and block_size "
            f"{r.block_size[i]}, expected {want}"
        )

    if bad.any():
        f.append(_Finding(Col.BLOCK_HASHES, np.flatnonzero(bad), describe))
    null_rows: list[np.ndarray] = []
    start = 0
    for chunk in r.hashes.chunks:
        flat = chunk.flatten()
        if flat.null_count:
            parent = pc.list_parent_indices(chunk).to_numpy().astype(np.int64)
            nulls = pc.is_null(pc.list_flatten(chunk)).to_numpy(zero_copy_only=False)
            null_rows.append(np.unique(parent[nulls]) + start)
        start += len(chunk)
    if null_rows:
        rows = np.concatenate(null_rows)
        f.append(_Finding(Col.BLOCK_HASHES, rows, lambda _i: "contains a null hash"))
    return f


def _id_findings(r: _Rows) -> list[_Finding]:
    f: list[_Finding] = []
    rows = np.arange(r.n, dtype=np.int64)
    valid = r.rid_code >= 0
    dup = valid & (_take(r.rid_count, r.rid_code, 0) > 1)
    dup &= _take(r.first_row_of_rid, r.rid_code, -1) != rows
    if dup.any():
        f.append(_Finding(
            Col.REQUEST_ID,
            np.flatnonzero(dup),
            lambda i: f"{r.rid(i)} duplicates row {r.first_row_of_rid[r.rid_code[i]]}",
        ))

    has_parent = ~r.parent_null
    dangling = has_parent & (r.parent_row < 0)
    if dangling.any():
        f.append(_Finding(
            Col.PARENT_REQUEST_ID,
            np.flatnonzero(dangling),
            lambda i: f"{r.parent(i)} is not a request_id in this file",
        ))

    linked = r.parent_row >= 0
    prow = np.maximum(r.parent_row, 0)
    psess = r.sid_code[prow]
    own_sess = r.sid_code
    same_session = linked & (psess == own_sess)
    sub_agent_start = (r.turn == 0) & (r.psid_code >= 0) & (psess == r.psid_code)
    other_session = linked & (psess != own_sess) & (own_sess >= 0) & ~sub_agent_start

    def describe_other(i: int) -> str:
        text = (
            f"{r.parent(i)} belongs to session {r.sid(int(r.parent_row[i]))}, not to this "
            f"request's session {r.sid(i)}"
        )
        if r.turn[i] == 0 and not r.psid_null[i]:
            text += f" nor to its parent_session_id {r.parent_session[i].as_py()!r}"
        elif r.turn[i] == 0:
            text += " (a sub-agent's first turn must name its parent_session_id)"
        return text

    if other_session.any():
        f.append(_Finding(Col.PARENT_REQUEST_ID, np.flatnonzero(other_session), describe_other))

    self_parent = linked & (r.parent_row == rows)
    if self_parent.any():
        f.append(_Finding(
            Col.PARENT_REQUEST_ID, np.flatnonzero(self_parent), lambda _i: "names itself"
        ))
    turn0_in_session = same_session & (r.turn == 0) & ~r.turn_null & ~self_parent
    if turn0_in_session.any():
        f.append(_Finding(
            Col.PARENT_REQUEST_ID,
            np.flatnonzero(turn0_in_session),
            lambda i: f"turn 0 has a parent {r.parent(i)} in its own session",
        ))
    later_no_parent = r.parent_null & (r.turn > 0)
    if later_no_parent.any():
        f.append(_Finding(
            Col.PARENT_REQUEST_ID,
            np.flatnonzero(later_no_parent),
            lambda i: f"missing for turn {r.turn[i]} (every turn after the first names its parent)",
        ))
    parent_later = linked & (r.arrival[prow] > r.arrival)
    if parent_later.any():
        f.append(_Finding(
            Col.PARENT_REQUEST_ID,
            np.flatnonzero(parent_later),
            lambda i: (
                f"{r.parent(i)} arrives at {r.arrival[r.parent_row[i]]:g} s, after this "
                f"request ({r.arrival[i]:g} s)"
            ),
        ))

    no_psess = ~r.psid_null & (r.psid_code < 0)
    if no_psess.any():
        f.append(_Finding(
            Col.PARENT_SESSION_ID,
            np.flatnonzero(no_psess),
            lambda i: f"{r.parent_session[i].as_py()!r} is not a session_id in this file",
        ))
    own_psess = ~r.psid_null & (r.psid_code >= 0) & (r.psid_code == own_sess)
    if own_psess.any():
        f.append(_Finding(
            Col.PARENT_SESSION_ID, np.flatnonzero(own_psess), lambda _i: "names its own session"
        ))
    cyclic = _session_cycles(r) & ~own_psess
    if cyclic.any():
        f.append(_Finding(
            Col.PARENT_SESSION_ID,
            np.flatnonzero(cyclic),
            lambda i: f"session {r.sid(i)} is its own ancestor through parent_session_id",
        ))
    return f


def _session_cycles(r: _Rows) -> np.ndarray:
    """Rows naming a parent session from which the parent chain never ends (a cycle)."""
    n = len(r.sid_values)
    names = ~r.psid_null & (r.psid_code >= 0) & (r.sid_code >= 0)
    if n == 0 or not names.any():
        return names
    parent = np.full(n, -1, dtype=np.int64)
    parent[r.sid_code[names]] = r.psid_code[names]
    ahead = parent.copy()
    for _ in range(int(np.ceil(np.log2(n + 1))) + 1):  # 2^k steps ahead, past any chain
        ahead = np.where(ahead >= 0, ahead[np.maximum(ahead, 0)], -1)
    return names & (ahead[np.maximum(r.sid_code, 0)] >= 0)


def _turn_findings(r: _Rows) -> list[_Finding]:
    """Turns 0..k-1 once each per session, arrival non-decreasing with turn index."""
    f: list[_Finding] = []
    idx = np.flatnonzero((r.sid_code >= 0) & ~r.turn_null & (r.turn >= 0))
    if idx.size == 0:
        return f
    order = idx[np.lexsort((r.turn[idx], r.sid_code[idx]))]
    s, t, a = r.sid_code[order], r.turn[order], r.arrival[order]
    same = s[1:] == s[:-1]
    starts = np.concatenate(([True], ~same))

    repeated = np.zeros(order.size, dtype=bool)
    eq = same & (t[1:] == t[:-1])
    repeated[1:] |= eq
    repeated[:-1] |= eq
    if repeated.any():
        f.append(_Finding(
            Col.TURN_INDEX,
            order[repeated],
            lambda i: f"turn {r.turn[i]} appears more than once in session {r.sid(i)}",
        ))
    bad_start = starts & (t != 0)
    if bad_start.any():
        f.append(_Finding(
            Col.TURN_INDEX,
            order[bad_start],
            lambda i: f"session {r.sid(i)} starts at turn {r.turn[i]}, expected 0",
        ))
    gap = np.zeros(order.size, dtype=bool)
    gap[1:] = same & (t[1:] > t[:-1] + 1)
    prev_turn = np.full(r.n, -1, dtype=np.int64)
    prev_row = np.full(r.n, -1, dtype=np.int64)
    prev_turn[order[1:]] = t[:-1]
    prev_row[order[1:]] = order[:-1]
    if gap.any():
        f.append(_Finding(
            Col.TURN_INDEX,
            order[gap],
            lambda i: (
                f"turn {r.turn[i]} follows turn {prev_turn[i]} in session {r.sid(i)} "
                "(turns must be numbered 0..k-1)"
            ),
        ))
    back = np.zeros(order.size, dtype=bool)
    back[1:] = same & (t[1:] != t[:-1]) & (a[1:] < a[:-1])
    if back.any():
        f.append(_Finding(
            Col.ARRIVAL,
            order[back],
            lambda i: (
                f"turn {r.turn[i]} arrives at {r.arrival[i]:g} s, before turn {prev_turn[i]} "
                f"(row {prev_row[i]}, {r.arrival[prev_row[i]]:g} s) of session {r.sid(i)}"
            ),
        ))
    return f


def validate_table(table: pa.Table, *, file: str, max_problems: int = 50) -> list[str]:
    """One line ``FILE: row N: FIELD: message`` per row problem (``N`` is 0-based).

    ``table`` must have the canonical schema (see :func:`conform_table`); what a replay
    needs beyond a well-formed trace is :func:`replay_problems`. Lines are
    ordered by row, then by rule; after ``max_problems`` lines a last line
    ``... and K more problems`` counts the rest. An empty list means the trace is valid.
    """
    r = _Rows(table)
    findings = [
        *_null_findings(table),
        *_number_findings(r),
        *_hash_findings(r),
        *_id_findings(r),
        *_turn_findings(r),
    ]
    return _lines(findings, file, max_problems, r.n)


def replay_problems(table: pa.Table, *, file: str, max_problems: int = 50) -> list[str]:
    """Lines as :func:`validate_table`'s for a valid trace that a replay cannot run:
    lengths and block sizes past the replay's limits, request ids that cannot travel in
    a header. ``pddbench trace validate`` and ``pddbench replay`` check them; analysis
    commands read such traces."""
    rows = _Rows(table)
    return _lines(_limit_findings(rows), file, max_problems, rows.n)


def _trace_wide(finding: _Finding, n_rows: int) -> bool:
    """Every row breaks the rule with one value: a problem of the trace, not of its rows."""
    if finding.values is None or n_rows < 2 or finding.rows.size != n_rows:
        return False
    values = finding.values
    return bool(np.all(values == values[0]))


def _lines(findings: list[_Finding], file: str, max_problems: int, n_rows: int) -> list[str]:
    """One line per row problem, except a trace-wide one: ``FILE: every row (N): FIELD: …``,
    once (a trace synthesised with one bad block size is one problem, not a million)."""
    wide = [f for f in findings if _trace_wide(f, n_rows)]
    findings = [f for f in findings if not _trace_wide(f, n_rows)]
    head = [f"{file}: every row ({n_rows:,}): {f.field}: {f.describe(0)}" for f in wide]
    head = head[: max(max_problems, 0)]
    total = sum(int(x.rows.size) for x in findings) + len(wide) - len(head)
    limit = max(max_problems - len(head), 0)
    candidates: list[tuple[int, int, int]] = []
    for rule, finding in enumerate(findings):
        firsts = np.sort(finding.rows)[:limit]
        candidates.extend((int(row), rule, k) for k, row in enumerate(firsts))
    candidates.sort()
    lines = []
    for row, rule, _ in candidates[:limit]:
        finding = findings[rule]
        lines.append(f"{file}: row {row}: {finding.field}: {finding.describe(row)}")
    if total > len(lines):
        lines.append(f"... and {total - len(lines)} more problems")
    return head + lines
