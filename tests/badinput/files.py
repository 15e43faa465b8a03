"""Bad inputs of the corpus, made on demand in one shared folder (one builder per name).

Every builder writes one file (or folder) under the workspace and returns its path; a
name is built once per test session. Good inputs (a replayable trace, a run folder) are
built here too, as the material the bad ones are derived from.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.workloads.schema import TRACE_SCHEMA, Col
from pddbench.workloads.traceio import build_table, write_trace

Builder = Callable[["Workspace"], Path]
BUILDERS: dict[str, Builder] = {}
SCENARIOS = Path(__file__).resolve().parents[2] / "pddbench" / "scenarios"


def builds(name: str) -> Callable[[Builder], Builder]:
    def register(fn: Builder) -> Builder:
        BUILDERS[name] = fn
        return fn

    return register


class Workspace:
    """One folder for the session; ``ws[name]`` builds (once) and returns a path."""

    def __init__(self, root: Path, url: str):
        self.root = root
        self.url = url  # the fault server's base URL
        self._built: dict[str, Path] = {}

    def __getitem__(self, name: str) -> Path:
        if name not in self._built:
            self._built[name] = BUILDERS[name](self) if name in BUILDERS else self.root / name
        return self._built[name]

    def out(self, case: str) -> Path:
        """A fresh output folder for one case."""
        path = self.root / "out" / case
        shutil.rmtree(path, ignore_errors=True)
        return path


# ------------------------------------------------------------------------- traces


def good_rows(n: int = 3, output: int = 8) -> dict[str, list]:
    return {
        "request_id": [f"r{i}" for i in range(n)],
        "session_id": [f"s{i}" for i in range(n)],
        "turn_index": [0] * n,
        "arrival_s": [0.02 * i for i in range(n)],
        "input_length": [64] * n,
        "output_length": [output] * n,
        "block_size": 64,
        "block_hashes": [[i + 1] for i in range(n)],
        "parent_request_id": [None] * n,
        "think_time_s": [None] * n,
    }


def _trace(ws: Workspace, name: str, **changes: object) -> Path:
    rows = good_rows()
    rows.update(changes)
    return write_trace(build_table(**rows), ws.root / f"{name}.parquet")


@builds("good.parquet")
def _good(ws: Workspace) -> Path:
    return _trace(ws, "good")


@builds("long.parquet")
def _long(ws: Workspace) -> Path:
    """Sessions arriving for 20 s: a replay of it is still running when it is interrupted."""
    rows = good_rows(40)
    rows.update(arrival_s=[0.5 * i for i in range(40)])
    return write_trace(build_table(**rows), ws.root / "long.parquet")


@builds("two-turn.parquet")
def _two_turn(ws: Workspace) -> Path:
    rows = good_rows(4)
    rows.update(session_id=["a", "a", "b", "b"], turn_index=[0, 1, 0, 1],
                parent_request_id=[None, "r0", None, "r2"], arrival_s=[0, 0.1, 0, 0.1])
    return write_trace(build_table(**rows), ws.root / "two-turn.parquet")


def _raw(ws: Workspace, name: str, data: bytes) -> Path:
    path = ws.root / name
    path.write_bytes(data)
    return path


def _table_file(ws: Workspace, name: str, table: pa.Table, **meta: bytes) -> Path:
    if meta:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    path = ws.root / name
    pq.write_table(table, path)
    return path


def _good_table() -> pa.Table:
    return build_table(**good_rows()).cast(TRACE_SCHEMA)


builds("t-empty-file.parquet")(lambda ws: _raw(ws, "t-empty-file.parquet", b""))
builds("t-garbage.parquet")(lambda ws: _raw(ws, "t-garbage.parquet", b"\x00\xffnot parquet" * 50))
builds("t-csv.parquet")(lambda ws: _raw(ws, "t-csv.parquet", b"request_id,arrival_s\nr0,0\n"))
builds("t-truncated.parquet")(
    lambda ws: _raw(ws, "t-truncated.parquet", ws["good.parquet"].read_bytes()[:300])
)
builds("t-tail-cut.parquet")(
    lambda ws: _raw(ws, "t-tail-cut.parquet", ws["good.parquet"].read_bytes()[:-40])
)


@builds("t-dir.parquet")
def _dir(ws: Workspace) -> Path:
    path = ws.root / "t-dir.parquet"
    path.mkdir(exist_ok=True)
    return path


@builds("t-zero-rows.parquet")
def _zero_rows(ws: Workspace) -> Path:
    return write_trace(TRACE_SCHEMA.empty_table(), ws.root / "t-zero-rows.parquet")


builds("t-no-request-id.parquet")(
    lambda ws: _table_file(ws, "t-no-request-id.parquet", _good_table().drop([Col.REQUEST_ID]))
)
builds("t-string-lengths.parquet")(lambda ws: _table_file(
    ws, "t-string-lengths.parquet",
    _good_table().set_column(
        _good_table().schema.get_field_index(Col.INPUT_LENGTH), Col.INPUT_LENGTH,
        pa.array(["64", "64", "x"]),
    ),
))
builds("t-epoch-text.parquet")(lambda ws: _table_file(
    ws, "t-epoch-text.parquet",
    _good_table().replace_schema_metadata({b"pddbench.epoch": b"yesterday"}),
))
builds("t-epoch-9999.parquet")(lambda ws: _table_file(
    ws, "t-epoch-9999.parquet",
    _good_table().replace_schema_metadata({b"pddbench.epoch": b"9999-12-31T23:59:59"}),
))
builds("t-version.parquet")(lambda ws: _table_file(
    ws, "t-version.parquet",
    _good_table().replace_schema_metadata({b"pddbench.trace_version": b"99"}),
))


@builds("t-null-session.parquet")
def _null_session(ws: Workspace) -> Path:
    table = _good_table()
    idx = table.schema.get_field_index(Col.SESSION_ID)
    nullable = pa.field(Col.SESSION_ID, pa.string(), nullable=True)
    table = table.set_column(idx, nullable, pa.array(["s0", None, "s2"]))
    return _table_file(ws, "t-null-session.parquet", table)

_BAD_ROWS: dict[str, dict[str, object]] = {
    "t-nan-arrival": {"arrival_s": [0.0, float("nan"), 0.1]},
    "t-negative-arrival": {"arrival_s": [0.0, -5.0, 0.1]},
    "t-inf-think": {"think_time_s": [None, float("inf"), None]},
    "t-duplicate-id": {"request_id": ["r0", "r0", "r2"]},
    "t-dangling-parent": {"parent_request_id": [None, "nope", None]},
    "t-self-parent": {"parent_request_id": [None, "r1", None], "turn_index": [0, 1, 0],
                      "session_id": ["s0", "s0", "s2"]},
    "t-zero-input": {"input_length": [64, 0, 64], "block_hashes": [[1], [], [3]]},
    "t-negative-output": {"output_length": [8, -3, 8]},
    "t-zero-output": {"output_length": [8, 0, 8]},
    "t-zero-block": {"block_size": [64, 0, 64]},
    "t-block-2": {"block_size": [64, 2, 64], "input_length": [64, 2, 64]},
    "t-block-huge": {"block_size": [64, 1 << 20, 64], "input_length": [64, 1 << 20, 64]},
    "t-input-2e9": {"block_size": [64, 1 << 16, 64], "input_length": [64, 2_000_000_000, 64],
                    "block_hashes": [[1], list(range(30518)), [3]]},
    "t-arrival-1e12": {"arrival_s": [0.0, 1e12, 0.1]},
    "t-output-1e7": {"output_length": [8, 10_000_000, 8]},
    "t-id-crlf": {"request_id": ["r0", "r1\r\nX-Evil: 1", "r2"]},
    "t-id-latin": {"request_id": ["r0", "réquête", "r2"]},
    "t-id-emoji": {"request_id": ["r0", "r\u2603", "r2"]},
    "t-id-long": {"request_id": ["r0", "r" * 300, "r2"]},
    "t-id-space-edge": {"request_id": ["r0", " r1", "r2"]},
    "t-hash-count": {"block_hashes": [[1], [2, 3, 4], [3]]},
    "t-turn-gap": {"session_id": ["s0", "s0", "s2"], "turn_index": [0, 2, 0],
                   "parent_request_id": [None, "r0", None]},
    "t-turn-repeat": {"session_id": ["s0", "s0", "s2"], "turn_index": [0, 0, 0]},
    "t-parent-later": {"session_id": ["s0", "s0", "s2"], "turn_index": [0, 1, 0],
                       "parent_request_id": [None, "r0", None], "arrival_s": [5.0, 1.0, 0.0]},
    "t-negative-turn": {"turn_index": [0, -1, 0]},
    "t-session-cycle": {"parent_session_id": ["s1", "s0", None],
                        "parent_request_id": [None, None, None]},
    "t-block-4-every-row": {"block_size": 4, "block_hashes": [list(range(16))] * 3},
}
for _name, _changes in _BAD_ROWS.items():
    builds(f"{_name}.parquet")(
        lambda ws, n=_name, c=_changes: _trace(ws, n, **c)  # type: ignore[misc]
    )

BAD_TRACES = [
    "t-empty-file", "t-garbage", "t-csv", "t-truncated", "t-tail-cut", "t-dir",
    "t-no-request-id", "t-string-lengths", "t-version", "t-missing", "t-null-session",
    "t-epoch-text", "t-epoch-9999",
    *_BAD_ROWS,
]
# well-formed traces a replay cannot run: `trace inspect` reads them
REPLAY_LIMITS = [
    "t-block-2", "t-block-4-every-row", "t-block-huge", "t-input-2e9", "t-output-1e7",
    "t-arrival-1e12", "t-id-crlf",
    "t-id-latin", "t-id-emoji", "t-id-long", "t-id-space-edge",
]


# ------------------------------------------------------------------------ importers


def _text(name: str, text: str) -> Builder:
    def build(ws: Workspace) -> Path:
        path = ws.root / name
        path.write_text(text)
        return path

    builds(name)(build)
    return build


_MC = '{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n'
_text("mc-good.jsonl", _MC)
_text("mc-empty.jsonl", "")
_text("mc-blank.jsonl", "\n\n\n")
_text("mc-garbage.jsonl", "this is not json\n")
_text("mc-list.jsonl", "[1, 2, 3]\n")
_text("mc-deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n")
_text("mc-deep-object.jsonl", '{"a":' * 50_000 + "1" + "}" * 50_000 + "\n")
_text("mc-no-timestamp.jsonl", '{"input_length": 10, "output_length": 8, "hash_ids": [1]}\n')
_text("mc-string-length.jsonl",
      '{"timestamp": 0, "input_length": "big", "output_length": 8, "hash_ids": [1]}\n')
_text("mc-negative-output.jsonl",
      '{"timestamp": 0, "input_length": 1024, "output_length": -1, "hash_ids": [1, 2]}\n')
_text("mc-nan-timestamp.jsonl",
      '{"timestamp": NaN, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n')
_text("mc-huge-timestamp.jsonl",
      '{"timestamp": 1e300, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}\n')
_text("mc-hash-strings.jsonl",
      '{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": ["a", "b"]}\n')
_text("mc-hash-huge.jsonl",
      '{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1e40, 2]}\n')
_text("mc-not-utf8.jsonl", "")  # replaced by bytes below


@builds("mc-not-utf8.jsonl")
def _not_utf8(ws: Workspace) -> Path:
    return _raw(ws, "mc-not-utf8.jsonl", b'{"timestamp": "\xff\xfe"}\n')


_AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
_text("az-good.csv", _AZ_HEAD + "2023-11-16 18:15:46.6805900,374,44\n")
_text("az-empty.csv", "")
_text("az-header-only.csv", _AZ_HEAD)
_text("az-missing-column.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n")
_text("az-extra-fields.csv", _AZ_HEAD + "2023-11-16 18:15:46.68,374,44,extra,more\n")
_text("az-year-99999.csv", _AZ_HEAD + "99999-11-16 18:15:46,374,44\n")
_text("az-year-1000.csv", _AZ_HEAD + "1000-01-01 00:00:00,374,44\n")
_text("az-bad-time.csv", _AZ_HEAD + "yesterday,374,44\n")
_text("az-negative-tokens.csv", _AZ_HEAD + "2023-11-16 18:15:46,-4,44\n")
_text("az-float-tokens.csv", _AZ_HEAD + "2023-11-16 18:15:46,3.5,44\n")
_text("az-huge-tokens.csv", _AZ_HEAD + "2023-11-16 18:15:46,99999999999,44\n")
_text("az-quote.csv", _AZ_HEAD + '"2023-11-16 18:15:46,374,44\n')


@builds("az-not-utf8.csv")
def _az_not_utf8(ws: Workspace) -> Path:
    return _raw(ws, "az-not-utf8.csv", _AZ_HEAD.encode() + b"\xff\xfe,1,2\n")


_text("weka-garbage.json", "{not json")
_text("weka-list.json", "[1, 2]")
_text("weka-deep.json", "[" * 100_000 + "]" * 100_000)
_text("weka-empty.json", "")
_text("weka-empty-object.json", "{}")
_text("weka-wrong-types.json", '{"sessions": "nope"}')


# the agentic formats: Bailian, BurstGPT, TraceLab, Dynamo, OpenTelemetry GenAI spans


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _bl(**changes: object) -> dict:
    return {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 32,
            "output_length": 8, "type": "text", "turn": 1, "hash_ids": [1, 2], **changes}


_text("bl-empty.jsonl", "")
_text("bl-garbage.jsonl", "chat_id=1 parent=-1\n")
_text("bl-list.jsonl", "[1, 2]\n")
_text("bl-wrong-types.jsonl", _jsonl(_bl(chat_id="one")))
_text("bl-string-hashes.jsonl", _jsonl(_bl(hash_ids="1,2")))
_text("bl-cycle.jsonl", _jsonl(_bl(chat_id=1, parent_chat_id=2), _bl(chat_id=2, parent_chat_id=1)))
_text("bl-self-parent.jsonl", _jsonl(_bl(chat_id=3, parent_chat_id=3)))
_text("bl-duplicate-chat.jsonl", _jsonl(_bl(), _bl()))
_text("bl-parent-later.jsonl", _jsonl(_bl(chat_id=1, parent_chat_id=2, timestamp=1.0),
                                      _bl(chat_id=2, timestamp=9.0)))
_text("bl-negative-time.jsonl", _jsonl(_bl(timestamp=-4.0)))
_text("bl-huge-time.jsonl", _jsonl(_bl(timestamp=1e300)))
_text("bl-nan-time.jsonl", _jsonl(_bl()).replace('"timestamp": 0.5', '"timestamp": NaN'))
_text("bl-hash-2e64.jsonl", _jsonl(_bl(hash_ids=[2**63, 2**64])))
_text("bl-hash-negative.jsonl", _jsonl(_bl(hash_ids=[2**63, -1])))
_text("bl-hash-count.jsonl", _jsonl(_bl(hash_ids=[1, 2, 3, 4])))

_BG1 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
_BG2 = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
        "Log Type\n")
_text("bg-good.csv", _BG1 + "5,ChatGPT,472,18,490,Conversation log\n")
_text("bg-empty.csv", "")
_text("bg-garbage.csv", "no commas here\njust words\n")
_text("bg-header-only.csv", _BG2)
_text("bg-string-tokens.csv", _BG1 + "5,ChatGPT,many,18,490,Conversation log\n")
_text("bg-negative-time.csv", _BG1 + "-5,ChatGPT,472,18,490,Conversation log\n")
_text("bg-huge-time.csv", _BG1 + "1e300,ChatGPT,472,18,490,Conversation log\n")
_text("bg-no-elapsed.csv", _BG1.replace("Timestamp,", "Timestamp,Session ID,")
      + "5,s1,ChatGPT,472,18,490,Conversation log\n")
_text("bg-negative-elapsed.csv", _BG2 + "5,s1,-3,ChatGPT,472,18,490,Conversation log\n")
_text("bg-all-failed.csv", _BG2 + "5,s1,3,ChatGPT,472,0,472,Conversation log\n")
_text("bg-extra-fields.csv", _BG1 + "5,ChatGPT,472,18,490,Conversation log,extra,more\n")


@builds("bg-not-utf8.csv")
def _bg_not_utf8(ws: Workspace) -> Path:
    return _raw(ws, "bg-not-utf8.csv", _BG1.encode() + b"5,\xff\xfe,472,18,490,x\n")


def _tl(**changes: object) -> dict:
    return {"session_id": "codex:s", "round_index": 0, "input_tokens_total": 100,
            "prefix_tokens": 80, "newly_append_tokens": 20, "output_tokens": 5,
            "timing_events": [{"event_type": "user_message", "timestamp": "2026-01-01T00:00:00Z"},
                              {"event_type": "text", "timestamp": "2026-01-01T00:00:01Z"}],
            "tools": [], **changes}


_text("tl-good.jsonl", _jsonl(_tl()))
_text("tl-empty.jsonl", "")
_text("tl-garbage.jsonl", "round 0 of codex:s\n")
_text("tl-list.jsonl", "[1]\n")
_text("tl-wrong-types.jsonl", _jsonl(_tl(session_id=7)))
_text("tl-string-tokens.jsonl", _jsonl(_tl(input_tokens_total="big")))
_text("tl-events-not-list.jsonl", _jsonl(_tl(timing_events="soon")))
_text("tl-bad-time.jsonl", _jsonl(_tl(timing_events=[
    {"event_type": "user_message", "timestamp": "yesterday"}])))
_text("tl-year-1000.jsonl", _jsonl(_tl(timing_events=[
    {"event_type": "user_message", "timestamp": "1000-01-01T00:00:00Z"}])))
_text("tl-year-99999.jsonl", _jsonl(_tl(timing_events=[
    {"event_type": "user_message", "timestamp": "99999-01-01T00:00:00Z"}])))
_text("tl-prefix-over.jsonl", _jsonl(_tl(prefix_tokens=500)))
_text("tl-undated.jsonl", _jsonl(_tl(timing_events=[])))


@builds("tl-bad-gzip.jsonl.gz")
def _tl_bad_gzip(ws: Workspace) -> Path:
    import gzip

    return _raw(ws, "tl-bad-gzip.jsonl.gz", gzip.compress(_jsonl(_tl()).encode())[:-12])


def _dy(rid: str = "r1", at: float = 1760000000000, context: dict | None = None,
        **replay: object) -> dict:
    record: dict = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                    "request": {"request_id": rid, "request_received_ms": at,
                                "output_tokens": 4,
                                "replay": {"trace_block_size": 16, "input_length": 32,
                                           "input_sequence_hashes": [2**63 + 1, 7],
                                           **replay}}}
    if context is not None:
        record["agent_context"] = context
    return record


_text("dy-empty.jsonl", "")
_text("dy-garbage.jsonl", "request_end r1\n")
_text("dy-wrong-schema.jsonl", _jsonl({**_dy(), "schema": "dynamo.request.trace.v2"}))
_text("dy-no-request.jsonl", _jsonl({"schema": "dynamo.request.trace.v1",
                                     "event_type": "request_end"}))
_text("dy-wrong-types.jsonl", _jsonl(_dy(input_length="32")))
_text("dy-cycle.jsonl", _jsonl(_dy("a", context={"session_id": "A", "parent_session_id": "B"}),
                               _dy("b", context={"session_id": "B", "parent_session_id": "A"})))
_text("dy-self-parent.jsonl", _jsonl(_dy(context={"session_id": "A",
                                                  "parent_session_id": "A"})))
_text("dy-negative-time.jsonl", _jsonl(_dy(at=-1)))
_text("dy-huge-time.jsonl", _jsonl(_dy(at=1e300)))
_text("dy-hash-2e64.jsonl", _jsonl(_dy(input_sequence_hashes=[2**63, 2**64])))
_text("dy-hash-negative.jsonl", _jsonl(_dy(input_sequence_hashes=[2**63, -5])))
_text("dy-hash-count.jsonl", _jsonl(_dy(input_sequence_hashes=[1])))
_text("dy-mixed-block.jsonl", _jsonl(_dy("a"), _dy("b", trace_block_size=32)))
_text("dy-duplicate-id.jsonl", _jsonl(_dy("a"), _dy("a")))
_text("dy-no-request-end.jsonl", _jsonl({"schema": "dynamo.request.trace.v1",
                                         "event_type": "tool_end"}))


def _ot(*spans: dict) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


def _span(sid: str = "c1", parent: str | None = None, start: object = "1760000000000000000",
          end: object = "1760000001000000000", *, op: str = "chat",
          tokens: dict | None = None) -> dict:
    attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": op}}]
    for key, value in (tokens if tokens is not None else
                       {"input_tokens": {"intValue": "100"},
                        "output_tokens": {"intValue": "5"}}).items():
        attributes.append({"key": f"gen_ai.usage.{key}", "value": value})
    span = {"traceId": "t1", "spanId": sid, "name": f"{op} m", "startTimeUnixNano": start,
            "endTimeUnixNano": end, "attributes": attributes}
    if parent is not None:
        span["parentSpanId"] = parent
    return span


_text("ot-empty.json", "")
_text("ot-garbage.json", "{resourceSpans: nope")
_text("ot-list.json", "[1, 2]")
_text("ot-no-resource-spans.json", '{"spans": []}')
_text("ot-wrong-types.json", _ot(_span(tokens={"input_tokens": {"stringValue": "many"},
                                                "output_tokens": {"intValue": "5"}})))
_text("ot-no-input-tokens.json", _ot(_span(tokens={"output_tokens": {"intValue": "5"}})))
_text("ot-cycle.json", _ot(_span("a", "b", op="invoke_agent", tokens={}),
                           _span("b", "a", op="invoke_agent", tokens={}), _span("c", "a")))
_text("ot-negative-time.json", _ot(_span(start="-5")))
_text("ot-huge-time.json", _ot(_span(start="99999999999999999999")))
_text("ot-end-before-start.json", _ot(_span(end="1750000000000000000")))
_text("ot-no-inference.json", _ot(_span(op="execute_tool", tokens={})))
_text("ot-duplicate-span.json", _ot(_span("a"), _span("a")))


# ------------------------------------------------------------------------ scenarios

_PDD = (SCENARIOS / "pdd.toml").read_text()


def _scenario(name: str, old: str, new: str, count: int = 1) -> None:
    assert old in _PDD, old
    _text(f"{name}.toml", _PDD.replace(old, new, count))


_scenario("sc-role-typo", 'role = "prefill"', 'role = "prefil"')
_scenario("sc-hardware", 'hardware = "h20"', 'hardware = "h2O"')
_scenario("sc-model", 'model = "pdd-flagship-1t"', 'model = "gpt-9"')
_scenario("sc-chips-negative", "chips = 16", "chips = -2")
_scenario("sc-chips-too-few", "chips = 16", "chips = 1")
_scenario("sc-chips-float", "chips = 16", "chips = 1.5")
_SLA = "\n[sla]"
_scenario("sc-sla-typo", _SLA, _SLA + "\nttft_ms = 4.0\n")
_scenario("sc-sla-negative", _SLA, _SLA + "\ntpot_s = -0.05\n")
_scenario("sc-sla-pct", _SLA, _SLA + "\ntarget_pct = 199.0\n")
_scenario("sc-sla-string", _SLA, _SLA + '\ne2e_s = "thirty"\n')
_scenario("sc-cost-typo", "line_cost = 0.3", "line_cst = 0.3")
_scenario("sc-cost-negative", "line_cost = 0.3", "line_cost = -1")
_scenario("sc-cost-unpriced", 'unit_price = { "h800-sxm" = 1.0, h20 = 1.25 }',
          'unit_price = { "h800-sxm" = 1.0, b200 = 2.0 }')
_scenario("sc-cost-stale-gpus", "line_cost = 0.3",
          'line_cost = 0.3\ngpus = { "h800-sxm" = 48, h20 = 32 }')
_scenario("sc-vocab-first", "vocab_size = 163840", "vocab_size = 163840\nfirst_token_id = 163839")
_scenario("sc-vocab-model", "vocab_size = 163840", "vocab_size = 32000")
_scenario("sc-handoff-typo", 'schedule = "adaptive"', 'schedul = "adaptive"')
_scenario("sc-routing-value", 'pipeline_policy = "hit-rate-aware"', 'pipeline_policy = "fastest"')
_scenario("sc-top-typo", 'emulation_scale = "auto"', 'emulation_scal = "auto"')
_scenario("sc-scale-negative", 'emulation_scale = "auto"', "emulation_scale = -1.0")
_scenario("sc-scale-text", 'emulation_scale = "auto"', 'emulation_scale = "fast"')
_scenario("sc-scale-list", 'emulation_scale = "auto"', "emulation_scale = [8]")
_scenario("sc-front-door", 'front_door = "router"', 'front_door = "gateway"')
_scenario("sc-duplicate-id", 'id = "md1"', 'id = "md0"')
_scenario("sc-no-router", 'role = "router"', 'role = "prefill"')
_scenario("sc-wrong-arch-role", 'role = "relay-decode"', 'role = "decode"')
_scenario("sc-missing-role", 'role = "main-decode"', 'role = "relay-decode"', 2)
_scenario("sc-api", 'api = "openai"', 'api = "grpc"')
_scenario("sc-requires", 'name = "pdd"', 'name = "pdd"\nrequires = ["tpu"]')
_scenario("sc-network-typo", "jitter_dist = \"uniform\"", "jitter_dist = \"gaussian-ish\"")
_scenario("sc-instance-typo", 'datacenter = "dc-b"', 'datacentre = "dc-b"')
_scenario("sc-bad-name", 'name = "pdd"', 'name = "pdd with spaces"')
_text("sc-not-toml.toml", "name = \n[[[")
_text("sc-engine-port.toml", 'name = "x"\n[[engines]]\nname = "e"\ncommand = ["a"]\nport = 70000\n')
_text("sc-engine-empty-command.toml", 'name = "x"\n[[engines]]\nname = "e"\ncommand = []\n')
_text("sc-both-kinds.toml", _PDD + '\n[[engines]]\nname = "e"\ncommand = ["a"]\n')
_text("sc-neither.toml", 'name = "x"\n')

BAD_SCENARIOS = [
    name[:-5] for name in BUILDERS if name.startswith("sc-") and name.endswith(".toml")
]


# --------------------------------------------------------------- run folders (finalize)


def journal_line(rid: str, **extra: object) -> str:
    row = {"request_id": rid, "session_id": "s", "turn_index": 0, "intended_send_s": 0.0,
           "status": "ok", "output_tokens": 8, **extra}
    return json.dumps(row) + "\n"


def _run_folder(ws: Workspace, name: str, journal: str | bytes | None,
                manifest: str | None = '{"status": "running"}') -> Path:
    root = ws.root / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    if journal is not None:
        data = journal.encode() if isinstance(journal, str) else journal
        (root / "journal.jsonl").write_bytes(data)
    if manifest is not None:
        (root / "manifest.json").write_text(manifest)
    return root


_GOOD_JOURNAL = journal_line("a") + journal_line("b")
_FINALIZE_RUNS: dict[str, tuple[str | bytes | None, str | None]] = {
    "run-list-line": (_GOOD_JOURNAL + "[1, 2]\n", None),
    "run-no-request-id": (_GOOD_JOURNAL + '{"status": "ok"}\n', None),
    "run-wrong-type": (_GOOD_JOURNAL + journal_line("c", ttft_s="fast"), None),
    "run-int-request-id": (_GOOD_JOURNAL + '{"request_id": 7}\n', None),
    "run-bool-tokens": (_GOOD_JOURNAL + journal_line("c", output_tokens=True), None),
    "run-garbage-line": (_GOOD_JOURNAL + "not json at all\n", None),
    "run-cut-line": (_GOOD_JOURNAL + '{"request_id": "c", "sta', None),
    "run-deep-line": (_GOOD_JOURNAL + "[" * 100_000 + "]" * 100_000 + "\n", None),
    "run-binary-line": (_GOOD_JOURNAL.encode() + b"\xff\xfe\x00\n", None),
    "run-string-list": (_GOOD_JOURNAL + journal_line("c", token_times_s=["x"]), None),
    "run-int-past-int64": (_GOOD_JOURNAL + journal_line("c", wan_bytes=10**30), None),
    "run-nan-literal": (_GOOD_JOURNAL + '{"request_id": "c", "ttft_s": NaN}\n', None),
    "run-manifest-list": (_GOOD_JOURNAL, "[1, 2]"),
    "run-manifest-garbage": (_GOOD_JOURNAL, "{not json"),
    "run-no-manifest": (_GOOD_JOURNAL, None),
}
for _name, (_journal, _manifest) in _FINALIZE_RUNS.items():
    builds(_name)(
        lambda ws, n=_name, j=_journal, m=_manifest: _run_folder(  # type: ignore[misc]
            ws, n, j, m if m is not None else '{"status": "running"}'
        ) if n != "run-no-manifest" else _run_folder(ws, n, j, None)
    )
builds("run-no-journal")(lambda ws: _run_folder(ws, "run-no-journal", None))


@builds("run-journal-dir")
def _journal_dir(ws: Workspace) -> Path:
    root = _run_folder(ws, "run-journal-dir", None)
    (root / "journal.jsonl").mkdir()
    return root


@builds("run-empty-over-good")
def _empty_over_good(ws: Workspace) -> Path:
    """An empty journal next to a good requests.parquet (finalised before)."""
    from pddbench.harness.rundir.records import finalize_journal

    root = _run_folder(ws, "run-empty-over-good", _GOOD_JOURNAL)
    finalize_journal(root / "journal.jsonl", root / "requests.parquet")
    (root / "journal.jsonl").write_text("")
    return root


FINALIZE_RUNS = [*_FINALIZE_RUNS]


# ------------------------------------------------------------------ runs for `report`


@builds("run-good")
def _run_good(ws: Workspace) -> Path:
    """A real finished run (replayed against the fault server) to derive broken ones."""
    from pddbench.cli import main

    out = ws.root / "run-good-out"
    shutil.rmtree(out, ignore_errors=True)
    assert main(["replay", "--trace", str(ws["good.parquet"]), "--target", f"{ws.url}/ok",
                 "--out", str(out)]) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def _broken_run(name: str, mutate: Callable[[Path], None]) -> None:
    def build(ws: Workspace) -> Path:
        root = ws.root / name
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(ws["run-good"], root)
        mutate(root)
        return root

    builds(name)(build)


def _set_column(root: Path, column: str, values: list[object]) -> None:
    table = pq.read_table(root / "requests.parquet")
    idx = table.schema.get_field_index(column)
    field = table.schema.field(idx)
    table = table.set_column(idx, field, pa.array(values, field.type))
    pq.write_table(table, root / "requests.parquet")


_broken_run("rep-no-records", lambda r: (r / "requests.parquet").unlink())
_broken_run("rep-garbage-records", lambda r: (r / "requests.parquet").write_bytes(b"garbage"))
_broken_run("rep-no-manifest", lambda r: (r / "manifest.json").unlink())
_broken_run("rep-garbage-manifest", lambda r: (r / "manifest.json").write_text("{nope"))
_broken_run("rep-list-manifest", lambda r: (r / "manifest.json").write_text("[]"))
_broken_run("rep-negative-ttft", lambda r: _set_column(r, "ttft_s", [-1.0, 0.01, 0.02]))
_broken_run("rep-nan-ttft", lambda r: _set_column(r, "ttft_s", [float("nan"), 0.01, 0.02]))
_broken_run("rep-no-column", lambda r: pq.write_table(
    pq.read_table(r / "requests.parquet").drop(["status"]), r / "requests.parquet"))
_broken_run("rep-zero-rows", lambda r: pq.write_table(
    pq.read_table(r / "requests.parquet").slice(0, 0), r / "requests.parquet"))
_broken_run("rep-bad-sla", lambda r: (r / "manifest.json").write_text(
    json.dumps({**json.loads((r / "manifest.json").read_text()),
                "scenario": {"name": "x", "sla": {"ttft_ms": 3}}})))
_broken_run("rep-bad-cost", lambda r: (r / "manifest.json").write_text(
    json.dumps({**json.loads((r / "manifest.json").read_text()),
                "scenario": {"name": "x", "cost": {"gpus": {"a": 1}}}})))


@builds("a-file")
def _a_file(ws: Workspace) -> Path:
    path = ws.root / "a-file"
    path.write_text("not a folder")
    return path
