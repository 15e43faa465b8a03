"""Trace importers: real public traces (when present), exact synthetic cases, bad input."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from pddbench.errors import TraceError, UserError
from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.importers import (
    ImportResult,
    import_azure,
    import_mooncake,
    import_weka,
)
from pddbench.workloads.importers.azure import AZURE_HASH_BASE
from pddbench.workloads.importers.cli import trace_import
from pddbench.workloads.importers.common import namespaced_hashes
from pddbench.workloads.importers.reconstruct import link_sessions
from pddbench.workloads.importers.weka import session_starts
from pddbench.workloads.schema import TRACE_SCHEMA, Col
from pddbench.workloads.traceio import read_trace
from pddbench.workloads.validate import validate_table

TRACES = Path(__file__).parents[2].parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake" / "conversation_trace.jsonl"
WEKA = TRACES / "weka"
AZURE = TRACES / "azure" / "AzureLLMInferenceTrace_conv.csv"


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"public trace not found at {path} (expected ../shared/traces)")


def _rows(result: ImportResult) -> list[dict]:
    return result.table.to_pylist()


def _token_hit(table: pa.Table) -> tuple[float, np.ndarray]:
    hits = prefix_hits(table)
    inputs = table.column(Col.INPUT_LENGTH).to_numpy()
    return float(hits.cached_tokens.sum() / inputs.sum()), hits.hit_rate


def _assert_valid(result: ImportResult) -> None:
    assert result.table.schema == TRACE_SCHEMA
    assert validate_table(result.table, file="imported") == []


def _assert_session_invariants(rows: list[dict], block_size: int) -> None:
    """Parents arrive first and are prefixes; turns run 0..k-1 within each session."""
    by_id = {r[Col.REQUEST_ID]: r for r in rows}
    turns: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        turns[r[Col.SESSION_ID]].append(r[Col.TURN_INDEX])
        parent_id = r[Col.PARENT_REQUEST_ID]
        if parent_id is None:
            assert r[Col.TURN_INDEX] == 0
            continue
        parent = by_id[parent_id]
        assert parent[Col.ARRIVAL] <= r[Col.ARRIVAL]
        if parent[Col.SESSION_ID] == r[Col.SESSION_ID]:
            assert r[Col.TURN_INDEX] == parent[Col.TURN_INDEX] + 1
        else:  # a fork / sub-agent: first turn of a child session
            assert r[Col.TURN_INDEX] == 0
            assert r[Col.PARENT_SESSION_ID] == parent[Col.SESSION_ID]
    for session, seen in turns.items():
        assert sorted(seen) == list(range(len(seen))), session


# --------------------------------------------------------------------------- Mooncake


@pytest.fixture(scope="module")
def mooncake() -> ImportResult:
    _need(MOONCAKE)
    return import_mooncake(MOONCAKE)


def test_mooncake_rows_schema_and_ids(mooncake: ImportResult) -> None:
    assert mooncake.num_requests == 12_031
    _assert_valid(mooncake)
    ids = mooncake.table.column(Col.REQUEST_ID).to_pylist()
    assert ids[0] == "mc-000000" and ids[-1] == "mc-012030"
    assert set(mooncake.table.column(Col.BLOCK_SIZE).to_pylist()) == {512}
    assert mooncake.epoch is None
    assert mooncake.source["importer"] == "mooncake"


def test_mooncake_unbounded_hit_rate(mooncake: ImportResult) -> None:
    token_hit, _ = _token_hit(mooncake.table)
    assert 0.36 <= token_hit <= 0.38


def test_mooncake_sessions(mooncake: ImportResult) -> None:
    rows = _rows(mooncake)
    _assert_session_invariants(rows, 512)
    by_id = {r[Col.REQUEST_ID]: r for r in rows}
    linked = [r for r in rows if r[Col.PARENT_REQUEST_ID] is not None]
    for r in linked:  # the parent's full blocks are a prefix of the child's blocks
        parent = by_id[r[Col.PARENT_REQUEST_ID]]
        full = parent[Col.INPUT_LENGTH] // 512
        assert full >= 2
        assert r[Col.BLOCK_HASHES][:full] == parent[Col.BLOCK_HASHES][:full]
        assert r[Col.INPUT_LENGTH] > parent[Col.INPUT_LENGTH]
    # about a third of the requests continue an earlier one; forks are rare
    assert 3_500 <= len(linked) <= 4_500
    forks = sum(1 for r in rows if r[Col.PARENT_SESSION_ID] is not None)
    assert 0 < forks < 200
    sizes = Counter(r[Col.SESSION_ID] for r in rows)
    assert max(sizes.values()) < 100  # no chaining of everything through block 0


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _mc(ts: int, size: int, hashes: list[int], out: int = 10) -> dict:
    return {"timestamp": ts, "input_length": size, "output_length": out, "hash_ids": hashes}


def test_mooncake_synthetic_reconstruction_exact(tmp_path: Path) -> None:
    records = [
        _mc(0, 1100, [0, 1, 2]),  # 0 A: root (full blocks [0, 1])
        _mc(1000, 1300, [0, 10, 11]),  # 1 U: unrelated root
        _mc(2000, 1800, [0, 1, 20, 21]),  # 2 B continues A (full [0, 1, 20])
        _mc(3000, 2300, [0, 1, 20, 30, 31]),  # 3 C continues B (full [0, 1, 20, 30])
        _mc(3000, 1900, [0, 1, 20, 40]),  # 4 D extends B too: B taken -> fork
        _mc(4000, 2400, [0, 1, 20, 41, 42]),  # 5 E: depth-3 match, latest is D -> D's branch
        _mc(5000, 2900, [0, 1, 20, 30, 60, 61]),  # 6 H: deepest is C (depth 4), not D
        _mc(6000, 1100, [0, 1, 2]),  # 7 repeat of A, not longer: no parent
        _mc(7000, 1400, [0, 50, 51]),  # 8 shares only block 0: own session
        _mc(8000, 1600, [0, 10, 11, 12]),  # 9 continues U
    ]
    result = import_mooncake(_write_jsonl(tmp_path / "mc.jsonl", records))
    _assert_valid(result)
    got = [
        (r[Col.SESSION_ID], r[Col.TURN_INDEX], r[Col.PARENT_REQUEST_ID], r[Col.PARENT_SESSION_ID])
        for r in _rows(result)
    ]
    assert got == [
        ("mc-000000", 0, None, None),
        ("mc-000001", 0, None, None),
        ("mc-000000", 1, "mc-000000", None),
        ("mc-000000", 2, "mc-000002", None),
        ("mc-000004", 0, "mc-000002", "mc-000000"),
        ("mc-000004", 1, "mc-000004", None),
        ("mc-000000", 3, "mc-000003", None),
        ("mc-000007", 0, None, None),
        ("mc-000008", 0, None, None),
        ("mc-000001", 1, "mc-000001", None),
    ]
    assert result.table.column(Col.ARRIVAL).to_pylist()[2] == 2.0
    assert result.table.column(Col.THINK_TIME).null_count == result.num_requests
    assert result.source["sessions"] == {"count": 5, "forks": 1}


def test_min_match_blocks_one_chains_through_block_zero(tmp_path: Path) -> None:
    records = [_mc(0, 700, [0, 70]), _mc(1000, 1200, [0, 71, 72])]
    path = _write_jsonl(tmp_path / "mc.jsonl", records)
    parents = import_mooncake(path).table.column(Col.PARENT_REQUEST_ID).to_pylist()
    assert parents == [None, None]
    parents = import_mooncake(path, min_match_blocks=1).table.column(Col.PARENT_REQUEST_ID)
    assert parents.to_pylist() == [None, "mc-000000"]
    with pytest.raises(UserError):
        import_mooncake(path, min_match_blocks=0)


def test_link_sessions_uses_arrival_order_not_row_order() -> None:
    # the continuation is listed first but arrives later
    links = link_sessions(
        [5.0, 1.0], [1600, 1100], [[0, 1, 2, 3], [0, 1, 2]], block_size=512
    )
    assert links.parent.tolist() == [1, -1]
    assert links.session_root.tolist() == [1, 1]
    assert links.turn.tolist() == [1, 0]


# --------------------------------------------------------------------------- WEKA


@pytest.fixture(scope="module")
def weka() -> ImportResult:
    _need(WEKA)
    return import_weka(WEKA)


def test_weka_conversations_and_subagents(weka: ImportResult) -> None:
    _assert_valid(weka)
    rows = _rows(weka)
    _assert_session_invariants(rows, 64)
    sessions = {r[Col.SESSION_ID]: r for r in rows}
    top = {s for s, r in sessions.items() if r[Col.PARENT_SESSION_ID] is None and "/" not in s}
    assert len(top) == 39
    firsts = [r for r in rows if r[Col.TURN_INDEX] == 0 and r[Col.PARENT_SESSION_ID] is not None]
    assert len(firsts) == 14
    assert {r[Col.SESSION_ID].split("/")[0] for r in firsts} == {
        "trace_0010", "trace_0274", "trace_0277", "trace_0282"
    }
    by_id = {r[Col.REQUEST_ID]: r for r in rows}
    for r in firsts:
        assert r[Col.SESSION_ID].startswith(r[Col.PARENT_SESSION_ID] + "/sub")
        spawner = by_id[r[Col.PARENT_REQUEST_ID]]
        assert spawner[Col.SESSION_ID] == r[Col.PARENT_SESSION_ID]
        assert spawner[Col.ARRIVAL] <= r[Col.ARRIVAL]
    agent = Counter(r[Col.AGENT_TYPE] for r in rows)
    assert set(agent) == {"main", "subagent"}
    assert agent["subagent"] == 196
    assert weka.num_requests == 3346


def test_weka_hash_namespaces(weka: ImportResult) -> None:
    owner: dict[int, str] = {}
    main_hashes: dict[str, set[int]] = defaultdict(set)
    sub_hashes: dict[str, list[set[int]]] = defaultdict(list)
    for r in _rows(weka):
        conv = r[Col.SESSION_ID].split("/")[0]
        hashes = set(r[Col.BLOCK_HASHES])
        for h in hashes:
            assert owner.setdefault(h, conv) == conv  # never shared across conversations
        if r[Col.AGENT_TYPE] == "main":
            main_hashes[conv] |= hashes
        elif r[Col.TURN_INDEX] == 0:
            sub_hashes[conv].append(hashes)
    for conv, subs in sub_hashes.items():
        assert len(set.intersection(*subs)) > 0  # sub-agents share their system prompt...
        assert all(not (s & main_hashes[conv]) for s in subs)  # ...but not the parent's


def test_weka_hit_rates(weka: ImportResult) -> None:
    token_hit, per_request = _token_hit(weka.table)
    assert 0.95 <= token_hit <= 0.97  # README: ≈ 96 %
    assert 0.85 <= float(np.mean(per_request >= 0.95)) <= 0.92  # README: ~89 %
    main = np.asarray(weka.table.column(Col.AGENT_TYPE).to_pylist()) == "main"
    assert 0.87 <= float(np.mean(per_request[main] >= 0.95)) <= 0.91


def test_weka_reblock_to_512(weka: ImportResult) -> None:
    coarse = import_weka(WEKA, block_size=512)
    _assert_valid(coarse)
    fine = {r[Col.REQUEST_ID]: r[Col.BLOCK_HASHES] for r in _rows(weka)}
    for r in _rows(coarse):
        assert r[Col.BLOCK_SIZE] == 512
        assert len(r[Col.BLOCK_HASHES]) == r[Col.INPUT_LENGTH] // 512
        assert r[Col.BLOCK_HASHES] == fine[r[Col.REQUEST_ID]][7::8]
    for bad in (100, 0, -64):
        with pytest.raises(UserError):
            import_weka(WEKA / "trace_0021.json", block_size=bad)


def _conversation(conv_id: str, requests: list[dict]) -> dict:
    return {"id": conv_id, "block_size": 64, "hash_id_scope": "local", "requests": requests}


def _wreq(t: float, size: int, ids: list[int], think: float | None = 0.0, out: int = 5) -> dict:
    req = {"t": t, "type": "n", "model": "m", "in": size, "out": out, "hash_ids": ids}
    if think is not None:
        req["think_time"] = think
    return req


def test_weka_synthetic_structure(tmp_path: Path) -> None:
    sub = {
        "t": 30.0, "type": "subagent", "duration_ms": 18_000, "agent_id": "agent_001",
        "requests": [_wreq(0.0, 128, [9, 10]), _wreq(4.0, 192, [9, 10, 11], think=2.0)],
    }
    first = [_wreq(0.0, 130, [1, 2]), _wreq(5.0, 200, [1, 2, 3], think=None), sub,
             _wreq(31.0, 260, [1, 2, 3, 4], think=25.0)]
    (tmp_path / "trace_a.json").write_text(json.dumps(_conversation("conv_a", first)))
    (tmp_path / "trace_b.json").write_text(
        json.dumps(_conversation("conv_b", [_wreq(0.0, 128, [1, 2])]))
    )
    (tmp_path / "notes.json").write_text("not a trace")  # ignored: not trace_*.json
    result = import_weka(tmp_path, session_gap_s=100.0, session_start="fixed")
    _assert_valid(result)
    rows = {r[Col.REQUEST_ID]: r for r in _rows(result)}
    assert list(rows) == [
        "conv_a/r0000", "conv_a/r0001", "conv_a/sub1/r0000", "conv_a/sub1/r0001",
        "conv_a/r0002", "conv_b/r0000",
    ]  # sorted by arrival
    s0, s1 = rows["conv_a/sub1/r0000"], rows["conv_a/sub1/r0001"]
    assert s0[Col.ARRIVAL] == pytest.approx(12.0)  # ends at 30 s after 18 s
    assert s1[Col.ARRIVAL] == pytest.approx(16.0)
    assert s0[Col.PARENT_REQUEST_ID] == "conv_a/r0001"  # last main request before 12 s
    assert s0[Col.PARENT_SESSION_ID] == "conv_a"
    assert (s1[Col.PARENT_REQUEST_ID], s1[Col.TURN_INDEX]) == ("conv_a/sub1/r0000", 1)
    assert rows["conv_a/r0002"][Col.PARENT_REQUEST_ID] == "conv_a/r0001"
    assert rows["conv_a/r0001"][Col.THINK_TIME] is None
    assert rows["conv_a/r0002"][Col.THINK_TIME] == 25.0
    assert rows["conv_b/r0000"][Col.ARRIVAL] == 100.0  # fixed session gap
    # namespaces: same local id -> same hash within a conversation (sub-agents included),
    # different hashes across conversations
    a0, b0 = rows["conv_a/r0000"][Col.BLOCK_HASHES], rows["conv_b/r0000"][Col.BLOCK_HASHES]
    assert a0 == rows["conv_a/r0002"][Col.BLOCK_HASHES][:2]
    assert not set(a0) & set(b0)
    assert a0 == namespaced_hashes("conv_a", np.array([1, 2])).tolist()


def test_session_starts_deterministic() -> None:
    a = session_starts(5, gap_s=60.0, policy="poisson", seed=3)
    b = session_starts(5, gap_s=60.0, policy="poisson", seed=3)
    c = session_starts(5, gap_s=60.0, policy="poisson", seed=4)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert session_starts(3, gap_s=10.0, policy="fixed", seed=0).tolist() == [0.0, 10.0, 20.0]
    assert session_starts(3, gap_s=0.0, policy="poisson", seed=0).tolist() == [0.0, 0.0, 0.0]


def test_weka_rejects_bad_options(tmp_path: Path) -> None:
    path = tmp_path / "trace_a.json"
    path.write_text(json.dumps(_conversation("a", [_wreq(0.0, 128, [1, 2])])))
    with pytest.raises(UserError, match="session gap"):
        import_weka(path, session_gap_s=-1.0)
    with pytest.raises(UserError, match="session start"):
        import_weka(path, session_start="uniform")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Azure


def test_azure_real_trace() -> None:
    _need(AZURE)
    result = import_azure(AZURE)
    _assert_valid(result)
    assert result.num_requests == 19_366 == result.num_sessions
    assert result.epoch is not None and result.epoch.startswith("2023-11-16T18:15:46.68059")
    token_hit, _ = _token_hit(result.table)
    assert token_hit == 0.0
    arrival = result.table.column(Col.ARRIVAL).to_numpy()
    assert arrival[0] == 0.0 and 3400 < arrival.max() < 3600


def test_azure_synthetic(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.5000000,1100,5\n"
        "2023-11-16 18:00:02.0000000,600,0\n"
        "2023-11-16 18:00:03.2500000,100,7\n"
    )
    result = import_azure(path, block_size=256)
    _assert_valid(result)
    assert result.epoch == "2023-11-16T18:00:00.500000+00:00"
    rows = _rows(result)
    assert [r[Col.ARRIVAL] for r in rows] == [0.0, 1.5, 2.75]
    assert [len(r[Col.BLOCK_HASHES]) for r in rows] == [4, 2, 0]
    flat = [h for r in rows for h in r[Col.BLOCK_HASHES]]
    assert flat == [AZURE_HASH_BASE + k for k in range(6)]
    assert [r[Col.OUTPUT_LENGTH] for r in rows] == [5, 1, 7]
    assert len(result.warnings) == 1 and f"{path}: line 3" in result.warnings[0]
    assert {r[Col.SESSION_ID] for r in rows} == {"az-000000", "az-000001", "az-000002"}


# --------------------------------------------------------------------------- bad input


def _expect_trace_error(fn, *needles: str) -> TraceError:  # type: ignore[no-untyped-def]
    with pytest.raises(TraceError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return info.value


GOOD_MC = json.dumps(_mc(0, 1100, [0, 1, 2]))


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (GOOD_MC + "\n{not json\n", "line 2", "not valid JSON"),
        ('{"timestamp": 0, "output_length": 1, "hash_ids": [0]}\n', "line 1", "'input_length'"),
        (GOOD_MC + '\n{"timestamp": 0, "input_length": "9", "output_length": 1, '
         '"hash_ids": [0]}\n', "line 2", "must be an integer"),
        ('{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": ["x"]}\n',
         "line 1", "'hash_ids'[0]"),
        ('{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": [0, 1, 2]}\n',
         "line 1", "needs 0 or 1"),
        ('{"timestamp": -5, "input_length": 9, "output_length": 1, "hash_ids": [0]}\n',
         "line 1", "'timestamp'"),
        (GOOD_MC + "\n\n[1, 2]\n", "line 3", "expected a JSON object"),
        ("\n\n", "", "no requests"),
    ],
)
def test_mooncake_malformed(tmp_path: Path, text: str, where: str, what: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    _expect_trace_error(lambda: import_mooncake(path), f"{path}: {where}".rstrip(": "), what)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _expect_trace_error(lambda: import_mooncake(empty), str(empty), "empty")
    _expect_trace_error(lambda: import_mooncake(tmp_path / "nope"), "nope", "no such file")
    _expect_trace_error(lambda: import_azure(empty), str(empty), "empty")
    _expect_trace_error(lambda: import_weka(tmp_path / "nope"), "nope", "no such file")
    _expect_trace_error(lambda: import_weka(tmp_path), str(tmp_path), "no trace_*.json")
    weka_empty = tmp_path / "trace_e.json"
    weka_empty.write_text("")
    _expect_trace_error(lambda: import_weka(weka_empty), str(weka_empty), "empty")


def test_weka_malformed(tmp_path: Path) -> None:
    path = tmp_path / "trace_x.json"
    path.write_text('{\n  "id": "x",\n  "requests": [\n  }\n')
    _expect_trace_error(lambda: import_weka(path), f"{path}: line 4", "not valid JSON")

    conv = _conversation("x", [_wreq(0.0, 128, [1, 2]), {"t": 1.0, "type": "n", "out": 1,
                                                         "hash_ids": [1, 2]}])
    path.write_text(json.dumps(conv))
    _expect_trace_error(lambda: import_weka(path), f"{path}: requests[1]", "missing field 'in'")

    conv = _conversation("x", [_wreq(0.0, 128, [1, "2"])])
    path.write_text(json.dumps(conv))
    _expect_trace_error(lambda: import_weka(path), f"{path}: requests[0]", "'hash_ids'[1]")

    sub = {"t": 9.0, "type": "subagent", "duration_ms": 1000,
           "requests": [_wreq(0.0, 128, [5, 6]), _wreq(1.0, "big", [5, 6])]}  # type: ignore[arg-type]
    path.write_text(json.dumps(_conversation("x", [_wreq(0.0, 128, [1, 2]), sub])))
    _expect_trace_error(
        lambda: import_weka(path), f"{path}: requests[1].requests[1]", "'in' must be an integer"
    )

    conv = _conversation("x", [_wreq(5.0, 128, [1, 2]), _wreq(1.0, 128, [1, 2])])
    path.write_text(json.dumps(conv))
    _expect_trace_error(lambda: import_weka(path), f"{path}: requests[1]", "before")


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n"
         "2023-11-16 18:00:01,ten,5\n", "line 3", "ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n"
         "yesterday,10,5\n", "line 3", "not a date-time"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,-1\n",
         "line 2", "GeneratedTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,10,5\n"
         "2023-11-16 18:00:01,10,5,7\n", "line 3", "not valid CSV"),
        ("TIMESTAMP,Tokens\n2023-11-16 18:00:00,10\n", "line 1", "ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "", "no requests"),
    ],
)
def test_azure_malformed(tmp_path: Path, text: str, where: str, what: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    _expect_trace_error(lambda: import_azure(path), f"{path}: {where}".rstrip(": "), what)


# --------------------------------------------------------------------------- CLI


def test_cli_writes_trace_and_summary(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "mc.jsonl", [_mc(0, 1100, [0, 1, 2]),
                                               _mc(1000, 1600, [0, 1, 2, 3])])
    out = tmp_path / "out" / "mc.parquet"
    result = CliRunner().invoke(trace_import, ["mooncake", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"2 requests, 1 sessions -> {out}"
    trace = read_trace(out)
    assert trace.num_requests == 2
    assert trace.source["importer"] == "mooncake"
    assert trace.source["inputs"] == [str(src)]


def test_cli_weka_and_azure_options(tmp_path: Path) -> None:
    src = tmp_path / "trace_a.json"
    src.write_text(json.dumps(_conversation("a", [_wreq(0.0, 1100, list(range(1, 18)))])))
    out = tmp_path / "w.parquet"
    result = CliRunner().invoke(
        trace_import, ["weka", str(src), "-o", str(out), "--block-size", "512", "--seed", "1"]
    )
    assert result.exit_code == 0, result.output
    trace = read_trace(out)
    assert trace.table.column(Col.BLOCK_HASHES).to_pylist()[0] == namespaced_hashes(
        "a", np.array([8, 16])
    ).tolist()
    assert trace.source["options"]["block_size"] == 512

    csv = tmp_path / "az.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00,1100,5\n")
    out = tmp_path / "a.parquet"
    result = CliRunner().invoke(trace_import, ["azure", str(csv), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert read_trace(out).epoch == "2023-11-16T18:00:00+00:00"


def test_cli_bad_input_raises_trace_error(tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(GOOD_MC + "\n{oops\n")
    result = CliRunner().invoke(trace_import, ["mooncake", str(src), "-o", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert isinstance(result.exception, TraceError)
    assert str(result.exception).startswith(f"{src}: line 2: not valid JSON")
    assert not (tmp_path / "o").exists()
