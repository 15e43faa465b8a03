"""The agentic trace formats (Bailian, BurstGPT v1/v2, TraceLab, Dynamo, OpenTelemetry):
a small file per format, written from its documentation (``formats/README.md``), through
``trace import``, ``trace validate`` and ``trace inspect``; then what each importer carries,
rebuilds and refuses."""

from __future__ import annotations

import gzip
import itertools
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.cli import main
from pddbench.errors import TraceError, UserError
from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.importers import (
    import_bailian,
    import_burstgpt,
    import_dynamo,
    import_otel,
    import_tracelab,
)
from pddbench.workloads.importers.blocks import chain_hashes, inherited_blocks
from pddbench.workloads.importers.common import get_hash_ids
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import read_trace, write_trace
from pddbench.workloads.validate import validate_table

FORMATS = Path(__file__).parent / "formats"

# format, file, requests, sessions, turns per session (max), token-weighted hit > 0
CASES = [
    ("bailian", "bailian.jsonl", 3, 2, 2, True),
    ("burstgpt", "burstgpt_v1.csv", 3, 3, 1, False),
    ("burstgpt", "burstgpt_v2.csv", 6, 4, 2, True),
    ("tracelab", "tracelab.jsonl", 4, 2, 3, True),
    ("dynamo", "dynamo.jsonl", 3, 2, 2, True),
    ("otel", "otel.json", 2, 1, 2, True),
]


def _rows(table) -> list[dict]:  # type: ignore[no-untyped-def]
    return table.to_pylist()


@pytest.mark.parametrize(("fmt", "name", "requests", "sessions", "turns", "hits"), CASES)
def test_documented_rows_import_validate_and_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, name: str,
    requests: int, sessions: int, turns: int, hits: bool,
) -> None:
    out = tmp_path / "t.parquet"
    assert main(["trace", "import", fmt, str(FORMATS / name), "-o", str(out)]) == 0
    assert f"{requests} requests, {sessions} sessions" in capsys.readouterr().out
    assert main(["trace", "validate", str(out)]) == 0
    assert f"ok: {requests} requests, {sessions} sessions" in capsys.readouterr().out
    assert main(["trace", "inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "turns per session" in text and "Hit-rate bins" in text and "99-100%" in text
    assert "prefix hashes" in text  # where the hashes came from is printed
    assert main(["trace", "inspect", "--json", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["requests"], summary["sessions"]) == (requests, sessions)
    assert summary["turns_per_session"]["max"] == turns
    assert sum(b["requests"] for b in summary["hit"]["bins"]) == requests
    assert (summary["hit"]["token_weighted"] > 0) is hits


# ---------------------------------------------------------------------------- Bailian


def test_bailian_sessions_from_parent_chain_and_chained_hashes() -> None:
    result = import_bailian(FORMATS / "bailian.jsonl")
    rows = {r[Col.REQUEST_ID]: r for r in _rows(result.table)}
    assert rows["bl-159"][Col.SESSION_ID] == "bl-55"
    assert rows["bl-159"][Col.PARENT_REQUEST_ID] == "bl-55"
    assert rows["bl-159"][Col.TURN_INDEX] == 1
    assert rows["bl-160"][Col.SESSION_ID] == "bl-160"
    # 159 re-sends 55's 18 full blocks: all of them hit; 160 shares ids 1089-1091 with 55
    # at the same positions (a hit) but its fourth id 6326 sits where 55 has 1092
    hits = prefix_hits(result.table)
    by_id = dict(zip(result.table.column(Col.REQUEST_ID).to_pylist(),
                     hits.cached_tokens.tolist(), strict=True))
    assert by_id["bl-159"] == 18 * 16 and by_id["bl-160"] == 3 * 16
    # chaining: 159's id 6326 at position 18 is not 160's 6326 at position 3
    chained = {r[Col.REQUEST_ID]: r[Col.BLOCK_HASHES] for r in rows.values()}
    assert chained["bl-159"][:18] == chained["bl-55"][:18]
    assert chained["bl-160"][3] not in chained["bl-159"]


def test_bailian_ceil_and_floor_hash_counts_give_the_same_hits(tmp_path: Path) -> None:
    """Bailian hashes the partial last block (ceil); a floor list is accepted; only full
    blocks count as hits either way."""
    floor = tmp_path / "floor.jsonl"
    lines = []
    for line in (FORMATS / "bailian.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["hash_ids"] = row["hash_ids"][: row["input_length"] // 16]
        lines.append(json.dumps(row))
    floor.write_text("\n".join(lines) + "\n")
    ceil_result, floor_result = import_bailian(FORMATS / "bailian.jsonl"), import_bailian(floor)
    counts = [len(h) for h in ceil_result.table.column(Col.BLOCK_HASHES).to_pylist()]
    assert counts == [19, 33, 5]  # ceil(300/16), ceil(521/16), ceil(72/16)
    assert [len(h) for h in floor_result.table.column(Col.BLOCK_HASHES).to_pylist()] == [
        18, 32, 4]
    assert validate_table(floor_result.table, file="f") == []
    np.testing.assert_array_equal(prefix_hits(ceil_result.table).cached_tokens,
                                  prefix_hits(floor_result.table).cached_tokens)


def test_bailian_missing_parent_fork_loop_and_later_parent(tmp_path: Path) -> None:
    def write(*rows: dict) -> Path:
        path = tmp_path / "b.jsonl"
        path.write_text("".join(json.dumps(
            {"timestamp": 0.0, "input_length": 16, "output_length": 1, "type": "text",
             "turn": 1, "hash_ids": [1], **r}) + "\n" for r in rows))
        return path

    result = import_bailian(write({"chat_id": 1, "parent_chat_id": 99}))
    assert "not in the file" in result.warnings[0]
    fork = import_bailian(write(
        {"chat_id": 1, "parent_chat_id": -1},
        {"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.0, "input_length": 32,
         "hash_ids": [1, 2]},
        {"chat_id": 3, "parent_chat_id": 1, "timestamp": 2.0, "input_length": 32,
         "hash_ids": [1, 3]},
    ))
    rows = {r[Col.REQUEST_ID]: r for r in _rows(fork.table)}
    assert rows["bl-2"][Col.SESSION_ID] == "bl-1"
    assert rows["bl-3"][Col.SESSION_ID] == "bl-3"  # a branch session
    assert rows["bl-3"][Col.PARENT_SESSION_ID] == "bl-1"
    assert validate_table(fork.table, file="f") == []
    with pytest.raises(TraceError, match="loop"):
        import_bailian(write({"chat_id": 1, "parent_chat_id": 2},
                             {"chat_id": 2, "parent_chat_id": 1}))
    with pytest.raises(TraceError, match="after this request"):
        import_bailian(write({"chat_id": 1, "parent_chat_id": 2, "timestamp": 1.0},
                             {"chat_id": 2, "parent_chat_id": -1, "timestamp": 5.0}))


# --------------------------------------------------------------------------- BurstGPT


def test_burstgpt_v2_keeps_sessions_and_counts_failures() -> None:
    result = import_burstgpt(FORMATS / "burstgpt_v2.csv")
    rows = _rows(result.table)
    first = [r for r in rows if r[Col.SESSION_ID].startswith("1722ac82")]
    assert [r[Col.TURN_INDEX] for r in first] == [0, 1]  # the failed middle turn dropped
    assert first[1][Col.PARENT_REQUEST_ID] == first[0][Col.REQUEST_ID]
    # think = 19440330 - (19440110 + 43) s
    assert first[1][Col.THINK_TIME] == pytest.approx(177.0)
    assert result.source["failed_requests"] == 1 and "dropped" in result.warnings[0]
    assert result.source["version"] == 2 and "synthetic" in str(result.source["hashes"])
    kept = import_burstgpt(FORMATS / "burstgpt_v2.csv", failed="keep")
    assert kept.table.num_rows == 7 and "set to 1" in kept.warnings[0]
    none = import_burstgpt(FORMATS / "burstgpt_v2.csv", prefix="none")
    assert prefix_hits(none.table).cached_tokens.sum() == 0
    history = prefix_hits(result.table).cached_tokens
    assert history.sum() == (906 // 64) * 64 + (36 // 64) * 64  # each follow-up re-sends


def test_burstgpt_v1_rows_are_their_own_sessions() -> None:
    result = import_burstgpt(FORMATS / "burstgpt_v1.csv")
    assert result.source["version"] == 1 and result.num_sessions == result.num_requests == 3
    assert result.table.column(Col.THINK_TIME).null_count == 3
    assert result.table.column(Col.ARRIVAL).to_pylist() == [0.0, 40.0, 113.0]


def test_block_size_options_a_replay_cannot_run_are_refused() -> None:
    for bad in (0, 4, 100_000):
        with pytest.raises(UserError, match="a replay could not run"):
            import_burstgpt(FORMATS / "burstgpt_v1.csv", block_size=bad)
        with pytest.raises(UserError, match="a replay could not run"):
            import_tracelab(FORMATS / "tracelab.jsonl", block_size=bad)


# --------------------------------------------------------------------------- TraceLab


def test_tracelab_think_times_and_prefix_blocks() -> None:
    result = import_tracelab(FORMATS / "tracelab.jsonl", block_size=16)
    rows = [r for r in _rows(result.table) if r[Col.SESSION_ID] == "codex:session"]
    assert [r[Col.TURN_INDEX] for r in rows] == [0, 1, 2]
    assert [r[Col.ARRIVAL] for r in rows] == [0.0, 3.0, 6.0]
    # round 1 follows round 0's last output (1 s) at 3 s; round 1 has no output event, so
    # round 2's think time is its longest tool latency (2.5 s)
    assert [r[Col.THINK_TIME] for r in rows] == [None, 2.0, 2.5]
    assert [r[Col.OUTPUT_LENGTH] for r in rows] == [8, 9, 12]  # reasoning tokens included
    hashes = [r[Col.BLOCK_HASHES] for r in rows]
    assert [len(h) for h in hashes] == [300 // 16, 350 // 16, 420 // 16]
    assert hashes[1][: 290 // 16] == hashes[0][: 290 // 16]
    assert hashes[1][290 // 16] not in hashes[0]
    assert hashes[2][: 350 // 16] == hashes[1][: 350 // 16]
    assert "without timing events dropped" in result.warnings[0]
    assert result.epoch == "2026-01-01T00:00:00+00:00"


def test_tracelab_reads_gzip(tmp_path: Path) -> None:
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress((FORMATS / "tracelab.jsonl").read_bytes()))
    a, b = import_tracelab(packed), import_tracelab(FORMATS / "tracelab.jsonl")
    assert a.table.equals(b.table)


# ----------------------------------------------------------------------------- Dynamo


def test_dynamo_sessions_children_and_hashes_past_2_63(tmp_path: Path) -> None:
    result = import_dynamo(FORMATS / "dynamo.jsonl")
    rows = {r[Col.REQUEST_ID]: r for r in _rows(result.table)}
    assert rows["req-3"][Col.PARENT_REQUEST_ID] == "req-1"
    assert rows["req-3"][Col.THINK_TIME] == pytest.approx(2.766)  # 4000 - 1234 ms
    child = rows["req-2"]
    assert child[Col.SESSION_ID] == "run-42:researcher" and child[Col.TURN_INDEX] == 0
    assert child[Col.PARENT_SESSION_ID] == "run-42:planner"
    assert child[Col.PARENT_REQUEST_ID] == "req-1"
    assert child[Col.BLOCK_HASHES][-1] == 2**64 - 1
    assert "skipped" in result.warnings[0]
    # unsigned 64-bit hashes survive the file and count as hits exactly
    path = write_trace(result.table, tmp_path / "d.parquet", source=result.source)
    back = read_trace(path)
    assert back.table.column(Col.BLOCK_HASHES).to_pylist() == \
        result.table.column(Col.BLOCK_HASHES).to_pylist()
    hits = dict(zip(back.table.column(Col.REQUEST_ID).to_pylist(),
                    prefix_hits(back.table).cached_tokens.tolist(), strict=True))
    assert hits == {"req-1": 0, "req-2": 32, "req-3": 32}
    packed = tmp_path / "d.jsonl.gz"
    packed.write_bytes(gzip.compress((FORMATS / "dynamo.jsonl").read_bytes()))
    assert import_dynamo(packed).table.equals(result.table)


def _dynamo_line(rid: str, at: int, context: dict | None, bs: int = 16) -> str:
    record: dict = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                    "request": {"request_id": rid, "request_received_ms": at,
                                "output_tokens": 4,
                                "replay": {"trace_block_size": bs, "input_length": 16,
                                           "input_sequence_hashes": [7]}}}
    if context is not None:
        record["agent_context"] = context
    return json.dumps(record) + "\n"


def test_dynamo_refuses_cycles_and_mixed_block_sizes(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(_dynamo_line("a", 1000, {"session_id": "A", "parent_session_id": "B"})
                    + _dynamo_line("b", 2000, {"session_id": "B", "parent_session_id": "A"}))
    with pytest.raises(TraceError, match="own ancestor"):
        import_dynamo(path)
    path.write_text(_dynamo_line("a", 1000, None) + _dynamo_line("b", 2000, None, bs=32))
    with pytest.raises(TraceError, match="line 2: trace_block_size 32 differs"):
        import_dynamo(path)
    orphan = {"session_id": "S", "parent_session_id": "gone"}
    path.write_text(_dynamo_line("a", 1000, None) + _dynamo_line("b", 2000, orphan))
    result = import_dynamo(path)
    assert "not in the file" in result.warnings[0]
    assert validate_table(result.table, file="d") == []


# ------------------------------------------------------------------------ OpenTelemetry


def test_otel_agent_names_cache_reads_and_jsonl(tmp_path: Path) -> None:
    result = import_otel(FORMATS / "otel.json", block_size=16)
    rows = _rows(result.table)
    assert [r[Col.AGENT_TYPE] for r in rows] == ["Coder", "Coder"]
    assert rows[1][Col.THINK_TIME] == pytest.approx(1.0)  # 3.1 s start - 2.1 s end
    # the second call reports 1152 cached tokens: 72 blocks of 16 shared with the first
    hashes = [r[Col.BLOCK_HASHES] for r in rows]
    assert hashes[1][:72] == hashes[0][:72] and hashes[1][72] not in hashes[0]
    assert "1 turn(s) share" in str(result.source["hashes"])
    doc = json.loads((FORMATS / "otel.json").read_text())
    lines = tmp_path / "spans.jsonl"
    lines.write_text(json.dumps(doc) + "\n" + json.dumps(doc).replace("5b8eff", "000000") + "\n")
    two = import_otel(lines, block_size=16)
    assert two.num_sessions == 2 and two.num_requests == 4


def test_otel_refuses_parent_loops(tmp_path: Path) -> None:
    doc = json.loads((FORMATS / "otel.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["parentSpanId"] = "c1"  # the agent's parent is its own chat span
    path = tmp_path / "loop.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="loop"):
        import_otel(path)


# ------------------------------------------------------------------- shared machinery


def test_hash_lists_mixing_both_sides_of_2_63_are_kept_exactly() -> None:
    values = [1, 2**63, 2**64 - 1, 5]
    assert get_hash_ids({"h": values}, "h", "w").tolist() == values  # numpy alone: float64
    for bad in ([1, 2**64], [1, -1], [1, 2.5], [True, 2**63]):
        with pytest.raises(TraceError, match=r"\[0, 2\^64\)"):
            get_hash_ids({"h": bad}, "h", "w")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=6), min_size=1, max_size=8))
def test_chained_values_are_equal_exactly_when_prefixes_are(rows: list[list[int]]) -> None:
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64)
    flat = np.asarray([v for r in rows for v in r], dtype=np.uint64)
    chained = chain_hashes(offsets, flat, namespace="t")
    cut = [chained[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    for i, a in enumerate(rows):
        for j, b in enumerate(rows):
            for k in range(min(len(a), len(b))):
                assert (cut[i][k] == cut[j][k]) == (a[: k + 1] == b[: k + 1]), (i, j, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), st.integers(0, 250)), min_size=1, max_size=8))
def test_inherited_blocks_share_exactly_the_stated_prefix(turns: list[tuple[int, int]]) -> None:
    """One session: turn k shares min(shared_k, its blocks, the previous turn's) blocks."""
    n = len(turns)
    lengths = np.asarray([t[0] for t in turns])
    shared = np.asarray([t[1] for t in turns])
    offsets, values = inherited_blocks(
        parent=np.arange(n) - 1, turn=np.arange(n), shared_tokens=shared,
        input_length=lengths, block_size=16, base=1 << 60)
    cut = [values[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    for k in range(1, n):
        common = min(shared[k] // 16, len(cut[k]), len(cut[k - 1]))
        assert cut[k][:common] == cut[k - 1][:common]
        assert not set(cut[k][common:]) & {v for row in cut[:k] for v in row}


def test_trace_synth_refuses_block_sizes_a_replay_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in ("4", "100000"):
        out = tmp_path / f"s{bad}.parquet"
        assert main(["trace", "synth", "--profile", "smoke", "--block-size", bad,
                     "-o", str(out)]) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(err) == 1 and "--block-size" in err[0] and not out.exists()


def test_validate_reports_one_block_size_for_every_row_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = import_tracelab(FORMATS / "tracelab.jsonl", block_size=16)
    bad = result.table.set_column(
        result.table.schema.get_field_index(Col.BLOCK_SIZE), Col.BLOCK_SIZE,
        [np.full(result.table.num_rows, 4, dtype=np.int32)])
    hashes = [[1] * (n // 4) for n in bad.column(Col.INPUT_LENGTH).to_pylist()]
    bad = bad.set_column(bad.schema.get_field_index(Col.BLOCK_HASHES), Col.BLOCK_HASHES,
                         pa.array(hashes, pa.list_(pa.uint64())))
    path = write_trace(bad, tmp_path / "b4.parquet")
    assert main(["trace", "validate", str(path)]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "every row (4): block_size: 4 is below" in err[0], err


# ------------------------------------------------------------- fuzz: never a traceback

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
        ["2026-01-01T00:00:00Z", "user_message", "text", "request_end", "chat",
         "dynamo.request.trace.v1", "-1"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=12,
)


def _record(keys: list[str]) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional={k: _values for k in keys})


_BL_KEYS = ["chat_id", "parent_chat_id", "timestamp", "input_length", "output_length",
            "hash_ids", "turn"]
_TL_KEYS = ["session_id", "round_index", "input_tokens_total", "prefix_tokens",
            "newly_append_tokens", "output_tokens", "reasoning_output_tokens",
            "timing_events", "tools"]
_DY_KEYS = ["schema", "event_type", "event_time_unix_ms", "agent_context", "request"]


def _outcome(fn, path: Path) -> None:  # type: ignore[no-untyped-def]
    try:
        result = fn(path)
    except UserError as exc:  # TraceError included: one line, naming the file
        assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
        return
    assert validate_table(result.table, file="fuzz") == []


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["bailian", "tracelab", "dynamo"]), st.data())
def test_arbitrary_records_give_a_valid_trace_or_one_line(kind: str, data: st.DataObject) -> None:
    keys = {"bailian": _BL_KEYS, "tracelab": _TL_KEYS, "dynamo": _DY_KEYS}[kind]
    rows = data.draw(st.lists(_record(keys), min_size=1, max_size=4))
    fn = {"bailian": import_bailian, "tracelab": import_tracelab, "dynamo": import_dynamo}[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        _outcome(fn, path)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_arbitrary_spans_give_a_valid_trace_or_one_line(data: st.DataObject) -> None:
    doc = json.loads((FORMATS / "otel.json").read_text())
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    span = spans[data.draw(st.integers(0, len(spans) - 1))]
    key = data.draw(st.sampled_from(["traceId", "spanId", "parentSpanId", "startTimeUnixNano",
                                     "endTimeUnixNano", "attributes"]))
    span[key] = data.draw(_values)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "o.json"
        path.write_text(json.dumps(doc))
        _outcome(import_otel, path)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["bailian", "tracelab", "dynamo"]), st.data())
def test_documented_rows_with_one_field_changed_give_a_valid_trace_or_one_line(
    kind: str, data: st.DataObject
) -> None:
    name = {"bailian": "bailian.jsonl", "tracelab": "tracelab.jsonl", "dynamo": "dynamo.jsonl"}
    rows = [json.loads(x) for x in (FORMATS / name[kind]).read_text().splitlines()]
    row = rows[data.draw(st.integers(0, len(rows) - 1))]
    target = row.get("event", row)  # Dynamo's sink envelope
    if kind == "dynamo" and data.draw(st.booleans()):
        target = target.get("request", target)
        if data.draw(st.booleans()):
            target = target.get("replay", target)
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(_values)
    fn = {"bailian": import_bailian, "tracelab": import_tracelab, "dynamo": import_dynamo}[kind]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        _outcome(fn, path)
