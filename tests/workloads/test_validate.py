"""Trace validation: valid random traces pass, every single corruption is named by row and
field, and a corpus of broken files fails through the real CLI with one clear line."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pddbench.workloads.inspect_cli import validate_command
from pddbench.workloads.schema import TRACE_SCHEMA, Col
from pddbench.workloads.traceio import write_trace
from pddbench.workloads.validate import conform_table, validate_table

FILE = "t.parquet"
Row = dict[str, Any]

# ------------------------------------------------------------------ random traces


@st.composite
def valid_rows(draw: st.DrawFn, min_sessions: int = 1, min_turns: int = 1) -> list[Row]:
    """A small valid trace as row dicts, rows in random order (sessions, sub-agents, partial
    or full-only hash lists, optional think times)."""
    block_size = draw(st.sampled_from([4, 16, 64]))
    rows: list[Row] = []
    for s in range(draw(st.integers(min_sessions, 4))):
        parent_row: Row | None = None
        if rows and draw(st.booleans()):
            parent_row = draw(st.sampled_from(rows))  # a sub-agent spawned by this request
        start = (parent_row["arrival_s"] if parent_row else 1.0) + draw(st.floats(0, 100))
        arrival = start
        session_rows: list[Row] = []
        for t in range(draw(st.integers(min_turns, 4))):
            arrival += 0.0 if t == 0 else draw(st.floats(0, 50))
            n_in = draw(st.integers(1, 300))
            n_hashes = draw(st.sampled_from([n_in // block_size, -(-n_in // block_size)]))
            if t > 0:
                parent = session_rows[-1]["request_id"]
            else:
                parent = parent_row["request_id"] if parent_row else None
            session_rows.append({
                Col.REQUEST_ID: f"req{len(rows) + len(session_rows)}",
                Col.SESSION_ID: f"s{s}",
                Col.PARENT_REQUEST_ID: parent,
                Col.TURN_INDEX: t,
                Col.ARRIVAL: arrival,
                Col.INPUT_LENGTH: n_in,
                Col.OUTPUT_LENGTH: draw(st.integers(1, 500)),
                Col.BLOCK_SIZE: block_size,
                Col.BLOCK_HASHES: draw(st.lists(st.integers(0, 2**64 - 1),
                                                min_size=n_hashes, max_size=n_hashes)),
                Col.THINK_TIME: draw(st.none() | st.floats(0, 60)),
                Col.AGENT_TYPE: draw(st.sampled_from([None, "main", "explore"])),
                Col.PARENT_SESSION_ID: parent_row[Col.SESSION_ID] if parent_row else None,
            })
        rows.extend(session_rows)
    return draw(st.permutations(rows))


def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=TRACE_SCHEMA)


@settings(max_examples=60, deadline=None)
@given(valid_rows())
def test_valid_random_traces_have_no_problems(rows: list[Row]) -> None:
    table, problems = conform_table(_table(rows), file=FILE)
    assert problems == []
    assert validate_table(table, file=FILE) == []


def _rows_of_session(rows: list[Row], session: str) -> list[int]:
    return sorted((i for i, r in enumerate(rows) if r[Col.SESSION_ID] == session),
                  key=lambda i: rows[i][Col.TURN_INDEX])


def _corrupt(rows: list[Row], kind: str, draw: st.DrawFn) -> tuple[int, str]:
    """Apply one corruption of ``kind``; return the row it was applied to and the field."""
    n = len(rows)
    any_row = draw(st.integers(0, n - 1))
    later = [i for i in range(n) if rows[i][Col.TURN_INDEX] > 0]
    r = any_row
    if kind == "null":
        field = draw(st.sampled_from([f.name for f in TRACE_SCHEMA if not f.nullable]))
        rows[r][field] = None
        return r, field
    simple = {
        "nan_arrival": (Col.ARRIVAL, math.nan),
        "inf_arrival": (Col.ARRIVAL, math.inf),
        "negative_arrival": (Col.ARRIVAL, -1.5),
        "nan_think": (Col.THINK_TIME, math.nan),
        "negative_think": (Col.THINK_TIME, -0.5),
        "zero_input": (Col.INPUT_LENGTH, 0),
        "negative_output": (Col.OUTPUT_LENGTH, -3),
        "zero_block_size": (Col.BLOCK_SIZE, 0),
        "negative_turn": (Col.TURN_INDEX, -1),
        "dangling_parent": (Col.PARENT_REQUEST_ID, "no-such-request"),
        "missing_parent_session": (Col.PARENT_SESSION_ID, "no-such-session"),
    }
    if kind in simple:
        field, value = simple[kind]
        rows[r][field] = value
        return r, field
    if kind == "null_hash":
        rows[r][Col.BLOCK_HASHES] = [*rows[r][Col.BLOCK_HASHES][:-1], None]
        return r, Col.BLOCK_HASHES
    if kind == "bad_hash_count":
        rows[r][Col.BLOCK_HASHES] = [*rows[r][Col.BLOCK_HASHES], 1, 2]
        return r, Col.BLOCK_HASHES
    if kind == "duplicate_id":
        r = max(r, 1)
        rows[r][Col.REQUEST_ID] = rows[draw(st.integers(0, r - 1))][Col.REQUEST_ID]
        return r, Col.REQUEST_ID
    session = rows[r][Col.SESSION_ID]
    members = _rows_of_session(rows, session)
    if kind == "repeated_turn":
        other = draw(st.sampled_from([i for i in members if i != r]))
        rows[r][Col.TURN_INDEX] = rows[other][Col.TURN_INDEX]
        return r, Col.TURN_INDEX
    if kind == "turn_gap":
        rows[r][Col.TURN_INDEX] = len(members) + 1
        return r, Col.TURN_INDEX
    if kind == "turn0_parent_in_session":
        r = members[0]
        rows[r][Col.PARENT_REQUEST_ID] = rows[members[1]][Col.REQUEST_ID]
        return r, Col.PARENT_REQUEST_ID
    r = draw(st.sampled_from(later))
    members = _rows_of_session(rows, rows[r][Col.SESSION_ID])
    if kind == "arrival_before_previous_turn":
        prev = members[rows[r][Col.TURN_INDEX] - 1]
        rows[r][Col.ARRIVAL] = rows[prev][Col.ARRIVAL] - 0.5
        return r, Col.ARRIVAL
    if kind == "parent_in_other_session":
        outside = [i for i in range(n) if rows[i][Col.SESSION_ID] != rows[r][Col.SESSION_ID]]
        rows[r][Col.PARENT_REQUEST_ID] = rows[draw(st.sampled_from(outside))][Col.REQUEST_ID]
        return r, Col.PARENT_REQUEST_ID
    raise AssertionError(kind)


CORRUPTIONS = [
    "null", "nan_arrival", "inf_arrival", "negative_arrival", "nan_think", "negative_think",
    "zero_input", "negative_output", "zero_block_size", "negative_turn", "dangling_parent",
    "missing_parent_session", "null_hash", "bad_hash_count", "duplicate_id", "repeated_turn",
    "turn_gap", "turn0_parent_in_session", "arrival_before_previous_turn",
    "parent_in_other_session",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_rows(min_sessions=2, min_turns=2), st.sampled_from(CORRUPTIONS), st.data())
def test_each_single_corruption_is_named_by_row_and_field(
    rows: list[Row], kind: str, data: st.DataObject
) -> None:
    row, field = _corrupt(rows, kind, data.draw)
    table, problems = conform_table(_table(rows), file=FILE)
    assert problems == []
    lines = validate_table(table, file=FILE)
    assert any(line.startswith(f"{FILE}: row {row}: {field}: ") for line in lines), (kind, lines)


ids = st.none() | st.sampled_from(["a", "b", "c", "d"])
ints = st.none() | st.integers(-3, 40)
floats = st.none() | st.floats(allow_nan=True, allow_infinity=True, width=64)
arbitrary_row = st.fixed_dictionaries({
    Col.REQUEST_ID: ids, Col.SESSION_ID: ids, Col.PARENT_REQUEST_ID: ids,
    Col.PARENT_SESSION_ID: ids, Col.TURN_INDEX: ints, Col.ARRIVAL: floats,
    Col.INPUT_LENGTH: ints, Col.OUTPUT_LENGTH: ints, Col.BLOCK_SIZE: ints,
    Col.BLOCK_HASHES: st.none() | st.lists(st.none() | st.integers(0, 9), max_size=12),
    Col.THINK_TIME: floats, Col.AGENT_TYPE: st.none(),
})
LINE = re.compile(
    rf"^{FILE}: (row \d+|every row \([\d,]+\)): [a-z_]+: \S.*$|^\.\.\. and \d+ more problems$"
)


@settings(max_examples=150, deadline=None)
@given(st.lists(arbitrary_row, max_size=12), st.integers(0, 8))
def test_arbitrary_rows_give_well_formed_lines_and_never_raise(
    rows: list[Row], max_problems: int
) -> None:
    lines = validate_table(_table(rows), file=FILE, max_problems=max_problems)
    assert all(LINE.match(x) for x in lines), lines
    assert len(lines) <= max_problems + 1


# -------------------------------------------------------------------- unit cases


def _base_rows() -> list[Row]:
    """Session s0 with three turns, session s1 with one; block size 4, 8 tokens each."""
    def row(rid: str, sid: str, turn: int, t: float, parent: str | None) -> Row:
        return {Col.REQUEST_ID: rid, Col.SESSION_ID: sid, Col.PARENT_REQUEST_ID: parent,
                Col.TURN_INDEX: turn, Col.ARRIVAL: t, Col.INPUT_LENGTH: 8,
                Col.OUTPUT_LENGTH: 4, Col.BLOCK_SIZE: 4, Col.BLOCK_HASHES: [1, 2],
                Col.THINK_TIME: None, Col.AGENT_TYPE: None, Col.PARENT_SESSION_ID: None}
    return [row("r0", "s0", 0, 0.0, None), row("r1", "s0", 1, 1.0, "r0"),
            row("r2", "s0", 2, 2.0, "r1"), row("r3", "s1", 0, 0.5, None)]


def test_problem_cap_adds_a_count_line() -> None:
    rows = [dict(r) for r in _base_rows() for _ in range(30)]
    for i, r in enumerate(rows):
        r[Col.REQUEST_ID] = f"x{i}"
        r[Col.PARENT_REQUEST_ID] = None
        r[Col.TURN_INDEX] = 0
        r[Col.SESSION_ID] = f"s{i}"
        r[Col.INPUT_LENGTH] = -(i % 2)  # 120 problems (two values: not trace-wide)
    lines = validate_table(_table(rows), file=FILE, max_problems=50)
    assert len(lines) == 51
    assert lines[0] == f"{FILE}: row 0: input_length: 0 is not positive"
    assert lines[49].startswith(f"{FILE}: row 49: ")
    assert lines[-1] == "... and 70 more problems"


def test_a_trace_wide_problem_is_one_line() -> None:
    """One bad value in every row (a trace written with one bad block size) is one line."""
    rows = [dict(r) for r in _base_rows()]
    for r in rows:
        r[Col.BLOCK_SIZE] = 0
    lines = validate_table(_table(rows), file=FILE)
    assert lines[0] == f"{FILE}: every row (4): block_size: 0 is not positive"
    assert not any(": row " in line and "block_size" in line for line in lines)
    wide = [dict(r, **{Col.BLOCK_SIZE: 4 if i else 0}) for i, r in enumerate(_base_rows())]
    assert validate_table(_table(wide), file=FILE)[0].startswith(f"{FILE}: row 0: block_size")


def test_sub_agent_first_turn_may_name_a_parent_in_its_parent_session() -> None:
    rows = _base_rows()
    rows[3][Col.PARENT_REQUEST_ID] = "r0"
    assert any("belongs to session 's0'" in x for x in validate_table(_table(rows), file=FILE))
    rows[3][Col.PARENT_SESSION_ID] = "s0"
    assert validate_table(_table(rows), file=FILE) == []


def test_conform_casts_safe_types_fills_optional_and_drops_extra() -> None:
    raw = pa.table({
        "extra": pa.array([1]),
        Col.REQUEST_ID: pa.array(["a"], type=pa.large_string()),
        Col.SESSION_ID: pa.array(["s"]).dictionary_encode(),
        Col.TURN_INDEX: pa.array([0], type=pa.int64()),
        Col.ARRIVAL: pa.array([3], type=pa.int64()),
        Col.INPUT_LENGTH: pa.array([8], type=pa.int64()),
        Col.OUTPUT_LENGTH: pa.array([2], type=pa.uint16()),
        Col.BLOCK_SIZE: pa.array([4], type=pa.int8()),
        Col.BLOCK_HASHES: pa.array([[5, 6]], type=pa.large_list(pa.int64())),
    })
    table, problems = conform_table(raw, file=FILE)
    assert problems == []
    assert table.schema.equals(TRACE_SCHEMA)
    assert table.column(Col.THINK_TIME).null_count == 1
    assert table.column(Col.BLOCK_HASHES).to_pylist() == [[5, 6]]
    assert validate_table(table, file=FILE) == []


def test_conform_reports_missing_uncastable_and_out_of_range() -> None:
    raw = pa.table({
        Col.REQUEST_ID: ["a", "b"], Col.SESSION_ID: ["s", "s"],
        Col.TURN_INDEX: pa.array([0, 1], type=pa.int64()),
        Col.ARRIVAL: ["0", "1"],  # strings: not castable
        Col.OUTPUT_LENGTH: pa.array([1, 2**40], type=pa.int64()),  # does not fit int32
        Col.BLOCK_SIZE: [4, 4],
        Col.BLOCK_HASHES: pa.array([[1, 2], [3, -7]], type=pa.list_(pa.int64())),
    })
    _, problems = conform_table(raw, file=FILE)
    assert problems == [
        f"{FILE}: column arrival_s: expected double, got string",
        f"{FILE}: missing required column input_length (int32)",
        f"{FILE}: row 1: output_length: value 1099511627776 does not fit int32",
        f"{FILE}: row 1: block_hashes: value -7 does not fit uint64",
    ]


# --------------------------------------------------------- broken files via the CLI


def _write_rows(path: Path, rows: list[Row]) -> Path:
    pq.write_table(_table(rows), path)
    return path


def _broken(tmp_path: Path, name: str) -> tuple[Path, str]:
    """Write the broken file ``name``; return it and the line expected on stderr."""
    p = tmp_path / f"{name}.parquet"
    rows = _base_rows()
    if name == "truncated":
        write_trace(_table(rows), p)
        p.write_bytes(p.read_bytes()[:-40])
        return p, f"{p}: not a readable parquet trace ("
    if name == "csv_renamed":
        p.write_text("request_id,session_id\nr0,s0\n")
        return p, f"{p}: not a readable parquet trace ("
    if name == "empty":
        p.write_bytes(b"")
        return p, f"{p}: not a readable parquet trace ("
    if name == "missing_file":
        return p, f"{p}: no such file"
    if name == "missing_column":
        pq.write_table(_table(rows).drop_columns([Col.INPUT_LENGTH]), p)
        return p, f"{p}: missing required column input_length (int32)\n"
    if name == "wrong_type":
        t = _table(rows)
        t = t.set_column(t.schema.get_field_index(Col.INPUT_LENGTH), Col.INPUT_LENGTH,
                         pa.array(["8"] * 4))
        pq.write_table(t, p)
        return p, f"{p}: column input_length: expected int32, got string\n"
    edits: dict[str, tuple[int, str, Any, str]] = {
        "nan_arrival": (1, Col.ARRIVAL, math.nan, "arrival_s: nan is not a finite number"),
        "zero_input": (2, Col.INPUT_LENGTH, 0, "input_length: 0 is not positive"),
        "bad_hash_count": (0, Col.BLOCK_HASHES, [1, 2, 3, 4, 5],
                           "block_hashes: 5 hashes for input_length 8 and block_size 4, "
                           "expected 2"),
        "dangling_parent": (1, Col.PARENT_REQUEST_ID, "ghost",
                            "parent_request_id: 'ghost' is not a request_id in this file"),
        "duplicate_id": (3, Col.REQUEST_ID, "r0", "request_id: 'r0' duplicates row 0"),
        "unsorted_turns": (2, Col.TURN_INDEX, 3, "turn_index: turn 3 follows turn 1 in session "
                           "'s0' (turns must be numbered 0..k-1)"),
    }
    row, field, value, message = edits[name]
    rows[row][field] = value
    _write_rows(p, rows)
    return p, f"{p}: row {row}: {message}\n"


BROKEN = ["truncated", "csv_renamed", "empty", "missing_file", "missing_column", "wrong_type",
          "nan_arrival", "zero_input", "bad_hash_count", "dangling_parent", "duplicate_id",
          "unsorted_turns"]


def _check_failure(rc: int, stderr: str, expected: str) -> None:
    assert rc == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith(expected), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("name", BROKEN)
def test_broken_file_cli_runner(tmp_path: Path, name: str) -> None:
    path, expected = _broken(tmp_path, name)
    result = CliRunner().invoke(validate_command, [str(path)])
    _check_failure(result.exit_code, result.stderr, expected)
    assert result.stdout == ""


def test_valid_file_cli_runner(tmp_path: Path) -> None:
    path = write_trace(_table(_replayable_rows()), tmp_path / "ok.parquet")
    result = CliRunner().invoke(validate_command, [str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: 4 requests, 2 sessions\n"


def test_validate_refuses_what_a_replay_cannot_run(tmp_path: Path) -> None:
    # block size 4 is a well-formed trace (inspect reads it) but too short a block for
    # the materialiser at the default vocabulary
    path = write_trace(_table(_base_rows()[:1]), tmp_path / "bs4.parquet")
    result = CliRunner().invoke(validate_command, [str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"{path}: row 0: block_size: 4 is below the 5 tokens a block needs to keep "
        "prompts of different hashes apart\n"
    )


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


_ENTRY = Path(sys.executable).parent / "pddbench"  # the installed console script


@pytest.mark.parametrize("name", BROKEN)
def test_broken_file_installed_cli(tmp_path: Path, name: str) -> None:
    path, expected = _broken(tmp_path, name)
    proc = _run([str(_ENTRY), "trace", "validate", str(path)])
    _check_failure(proc.returncode, proc.stderr, expected)
    assert proc.stdout == ""


def _replayable_rows() -> list[Row]:
    return [{**r, Col.BLOCK_SIZE: 8, Col.INPUT_LENGTH: 16} for r in _base_rows()]


def test_valid_file_installed_cli(tmp_path: Path) -> None:
    ok = write_trace(_table(_replayable_rows()), tmp_path / "ok.parquet")
    proc = _run([str(_ENTRY), "trace", "validate", str(ok)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok: 4 requests, 2 sessions\n"


def test_empty_trace_is_valid() -> None:
    table, problems = conform_table(TRACE_SCHEMA.empty_table(), file=FILE)
    assert problems == [] and validate_table(table, file=FILE) == []
