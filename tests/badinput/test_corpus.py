"""The bad-input corpus: one table of cases, one test, run through the real CLI entry point.

Each case is a command line of ``pddbench`` (``pddbench.cli.main``, the console script's
own function, in this process) and what must come of it:

* bad input (``code`` 2): exactly one line on stderr, holding ``says``, no traceback,
  no "internal error" — and for ``replay``, no run folder created (refused before);
* server faults (``status``/``error_class``): the replay completes, every record has
  that status and error class, the exit status says whether anything succeeded;
* finalize: the records that are records are recovered, the rest counted.

Classes (``klass``) are listed in README.md (Troubleshooting: the bad-input corpus).
Files are made on demand in one shared folder (:mod:`tests.badinput.files`); one fault
server (:mod:`tests.badinput.fault_server`) serves every server case.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pddbench.cli import main
from tests.badinput.files import (
    BAD_SCENARIOS,
    BAD_TRACES,
    FINALIZE_RUNS,
    REPLAY_LIMITS,
    Workspace,
)

ROOT = Path(__file__).resolve().parents[2]
Argv = Callable[[Workspace, Path], list[str]]


@dataclass(frozen=True)
class Case:
    id: str
    klass: str
    argv: Argv
    code: int = 2
    says: str = ""  # must appear in the error line (code 2) or on stderr
    status: str | None = None  # server faults: every record's status ...
    error_class: str | None = None  # ... and error class
    records: int | None = None  # finalize: records recovered
    lines: int = 1  # error lines (a trace lists one line per problem found)
    interrupt: int | None = None  # interruption: this signal once the journal has a record
    message: str | None = None  # server faults: in every record's error message
    xfail: str | None = None


def _ws_path(name: str) -> Callable[[Workspace], str]:
    return lambda ws: str(ws[name])


CASES: list[Case] = []


def case(*args: object, **kwargs: object) -> None:
    CASES.append(Case(*args, **kwargs))  # type: ignore[arg-type]


# ---------------------------------------------------------------- traces (3 commands each)

_TRACE_SAYS = {
    "t-missing": "t-missing.parquet", "t-empty-file": "not a readable parquet",
    "t-dir": "directory",
    "t-no-request-id": "request_id", "t-string-lengths": "input_length",
    "t-version": "version 99", "t-nan-arrival": "arrival_s", "t-negative-arrival": "negative",
    "t-inf-think": "think_time_s", "t-duplicate-id": "duplicates",
    "t-dangling-parent": "parent_request_id", "t-self-parent": "names itself",
    "t-zero-input": "input_length", "t-negative-output": "output_length",
    "t-zero-output": "output_length", "t-zero-block": "block_size", "t-block-2": "block_size",
    "t-block-huge": "block_size", "t-input-2e9": "input_length", "t-output-1e7": "output_length",
    "t-id-crlf": "X-Request-Id", "t-id-latin": "X-Request-Id", "t-id-emoji": "X-Request-Id",
    "t-id-long": "X-Request-Id", "t-id-space-edge": "X-Request-Id",
    "t-hash-count": "block_hashes", "t-turn-gap": "turn_index", "t-turn-repeat": "turn_index",
    "t-parent-later": "parent_request_id", "t-negative-turn": "turn_index",
    "t-null-session": "session_id", "t-arrival-1e12": "arrival_s", "t-epoch-text": "epoch",
    "t-epoch-9999": "epoch", "t-session-cycle": "own ancestor",
    "t-block-4-every-row": "every row (3): block_size: 4",
}
_TRACE_LINES = {"t-turn-repeat": 2, "t-parent-later": 2, "t-session-cycle": 2}
for _t in BAD_TRACES:
    _file = f"{_t}.parquet"
    _says = _TRACE_SAYS.get(_t, "")
    _n = _TRACE_LINES.get(_t, 1)
    case(f"validate-{_t}", "traces", lambda ws, o, f=_file: ["trace", "validate", str(ws[f])],
         says=_says, lines=_n)
    if _t not in REPLAY_LIMITS:
        case(f"inspect-{_t}", "traces", lambda ws, o, f=_file: ["trace", "inspect", str(ws[f])],
             says=_says, lines=_n)
    case(f"replay-{_t}", "traces", lambda ws, o, f=_file: [
        "replay", "--trace", str(ws[f]), "--target", f"{ws.url}/ok", "--out", str(o)],
        says=_says, lines=_n + (_n > 1))  # several problems: a count line, then each
case("replay-zero-rows", "traces", lambda ws, o: [
    "replay", "--trace", str(ws["t-zero-rows.parquet"]), "--target", f"{ws.url}/ok",
    "--out", str(o)], says="keeps no request")
case("replay-block-2-scenario", "traces", lambda ws, o: [
    "replay", "--trace", str(ws["t-block-2.parquet"]), "--scenario", "colocated",
    "--no-emulation", "--out", str(o)], says="block_size")

# --------------------------------------------------------------------------- importers

_IMPORTS: dict[str, dict[str, str]] = {
    "mooncake": {
        "mc-empty.jsonl": "empty", "mc-blank.jsonl": "no requests",
        "mc-garbage.jsonl": "not valid JSON", "mc-list.jsonl": "JSON object",
        "mc-deep.jsonl": "nested too deeply", "mc-deep-object.jsonl": "nested too deeply",
        "mc-no-timestamp.jsonl": "timestamp", "mc-string-length.jsonl": "input_length",
        "mc-negative-output.jsonl": "output_length", "mc-nan-timestamp.jsonl": "timestamp",
        "mc-huge-timestamp.jsonl": "out of range", "mc-hash-strings.jsonl": "hash_ids",
        "mc-hash-huge.jsonl": "hash_ids", "mc-not-utf8.jsonl": "line 1", "missing.jsonl": "",
    },
    "azure": {
        "az-empty.csv": "empty", "az-header-only.csv": "no requests",
        "az-missing-column.csv": "GeneratedTokens", "az-extra-fields.csv": "line 2: 5 fields",
        "az-year-99999.csv": "TIMESTAMP", "az-year-1000.csv": "years 1677-2262",
        "az-bad-time.csv": "TIMESTAMP", "az-negative-tokens.csv": "ContextTokens",
        "az-float-tokens.csv": "ContextTokens", "az-huge-tokens.csv": "ContextTokens",
        "az-quote.csv": "", "az-not-utf8.csv": "UTF-8",
    },
    "weka": dict.fromkeys(
        ("weka-garbage.json", "weka-list.json", "weka-deep.json", "weka-empty.json",
         "weka-empty-object.json", "weka-wrong-types.json", "missing-weka"), ""
    ),
    "bailian": {
        "bl-empty.jsonl": "empty", "bl-garbage.jsonl": "not valid JSON",
        "bl-list.jsonl": "JSON object", "bl-wrong-types.jsonl": "chat_id",
        "bl-string-hashes.jsonl": "hash_ids", "bl-cycle.jsonl": "loop (chat 1 -> 2 -> 1)",
        "bl-self-parent.jsonl": "own chat_id", "bl-duplicate-chat.jsonl": "already used",
        "bl-parent-later.jsonl": "after this request", "bl-negative-time.jsonl": "timestamp",
        "bl-huge-time.jsonl": "out of range", "bl-nan-time.jsonl": "finite",
        "bl-hash-2e64.jsonl": "hash_ids'[1]", "bl-hash-negative.jsonl": "hash_ids'[1]",
        "bl-hash-count.jsonl": "4 blocks", "mc-deep.jsonl": "nested too deeply",
        "mc-not-utf8.jsonl": "not UTF-8",
    },
    "burstgpt": {
        "bg-empty.csv": "empty", "bg-garbage.csv": "missing column",
        "bg-header-only.csv": "no requests", "bg-string-tokens.csv": "Request tokens",
        "bg-negative-time.csv": "Timestamp", "bg-huge-time.csv": "Timestamp",
        "bg-no-elapsed.csv": "Elapsed time", "bg-negative-elapsed.csv": "Elapsed time",
        "bg-all-failed.csv": "failed request", "bg-extra-fields.csv": "8 fields",
        "bg-not-utf8.csv": "UTF-8", "az-good.csv": "Timestamp",
    },
    "tracelab": {
        "tl-empty.jsonl": "empty", "tl-garbage.jsonl": "not valid JSON",
        "tl-list.jsonl": "JSON object", "tl-wrong-types.jsonl": "session_id",
        "tl-string-tokens.jsonl": "input_tokens_total",
        "tl-events-not-list.jsonl": "timing_events", "tl-bad-time.jsonl": "ISO-8601",
        "tl-year-1000.jsonl": "out of range", "tl-year-99999.jsonl": "ISO-8601",
        "tl-prefix-over.jsonl": "exceed", "tl-undated.jsonl": "no rounds",
        "tl-bad-gzip.jsonl.gz": "gzip", "mc-deep-object.jsonl": "nested too deeply",
    },
    "dynamo": {
        "dy-empty.jsonl": "empty", "dy-garbage.jsonl": "not valid JSON",
        "dy-wrong-schema.jsonl": "schema", "dy-no-request.jsonl": "'request'",
        "dy-wrong-types.jsonl": "input_length", "dy-cycle.jsonl": "own ancestor",
        "dy-self-parent.jsonl": "own parent", "dy-negative-time.jsonl": "request_received_ms",
        "dy-huge-time.jsonl": "out of range", "dy-hash-2e64.jsonl": "input_sequence_hashes",
        "dy-hash-negative.jsonl": "input_sequence_hashes", "dy-hash-count.jsonl": "1 blocks",
        "dy-mixed-block.jsonl": "differs", "dy-duplicate-id.jsonl": "already used",
        "dy-no-request-end.jsonl": "no request_end", "tl-bad-gzip.jsonl.gz": "gzip",
    },
    "otel": {
        "ot-empty.json": "empty", "ot-garbage.json": "not valid JSON",
        "ot-list.json": "JSON object", "ot-no-resource-spans.json": "resourceSpans",
        "ot-wrong-types.json": "gen_ai.usage.input_tokens",
        "ot-no-input-tokens.json": "gen_ai.usage.input_tokens", "ot-cycle.json": "loop",
        "ot-negative-time.json": "startTimeUnixNano",
        "ot-huge-time.json": "startTimeUnixNano", "ot-end-before-start.json": "before",
        "ot-no-inference.json": "no GenAI inference spans",
        "ot-duplicate-span.json": "already used", "mc-deep.jsonl": "nested too deeply",
    },
}
for _kind, _sources in _IMPORTS.items():
    for _src, _says in _sources.items():
        case(f"import-{_kind}-{_src}", "importers", lambda ws, o, k=_kind, s=_src: [
            "trace", "import", k, str(ws[s]), "-o", str(o / "t.parquet")], says=_says)
case("import-output-is-dir", "importers", lambda ws, o: [
    "trace", "import", "mooncake", str(ws["mc-good.jsonl"]), "-o", str(ws["t-dir.parquet"])])
case("import-output-under-file", "importers", lambda ws, o: [
    "trace", "import", "mooncake", str(ws["mc-good.jsonl"]), "-o",
    str(ws["a-file"] / "t.parquet")])
case("import-azure-block-0", "importers", lambda ws, o: [
    "trace", "import", "azure", str(ws["az-good.csv"]), "-o", str(o / "t.parquet"),
    "--block-size", "0"], says="block")
for _kind, _src, _bad in (("burstgpt", "bg-good.csv", "4"), ("burstgpt", "bg-good.csv", "0"),
                          ("tracelab", "tl-good.jsonl", "100000")):
    case(f"import-{_kind}-block-{_bad}", "importers", lambda ws, o, k=_kind, s=_src, b=_bad: [
        "trace", "import", k, str(ws[s]), "-o", str(o / "t.parquet"), "--block-size", b],
        says="a replay could not run")
for _bad in ("4", "100000", "0"):
    case(f"synth-block-{_bad}", "options", lambda ws, o, b=_bad: [
        "trace", "synth", "--profile", "smoke", "--block-size", b, "-o", str(o / "t.parquet")],
        says="--block-size")
case("import-mooncake-min-match-0", "importers", lambda ws, o: [
    "trace", "import", "mooncake", str(ws["mc-good.jsonl"]), "-o", str(o / "t.parquet"),
    "--min-match-blocks", "0"], says="min_match_blocks")

# --------------------------------------------------------------------------- scenarios

_SCALE = 'allowed: "auto" or a number > 0'  # one line, no pydantic type names
_SC_SAYS = {
    "sc-role-typo": "deployment.instances[1].role", "sc-hardware": "hardware",
    "sc-model": "deployment.model", "sc-chips-negative": "chips",
    "sc-chips-too-few": "chips", "sc-chips-float": "chips",
    "sc-sla-typo": "sla.ttft_ms: unknown key (a typo?)",
    "sc-sla-negative": "sla.tpot_s", "sc-sla-pct": "sla.target_pct", "sc-sla-string": "sla.e2e_s",
    "sc-cost-typo": "cost.line_cst", "sc-cost-negative": "cost.line_cost",
    "sc-cost-unpriced": "no price for 'h20'", "sc-cost-stale-gpus": "cost.gpus",
    "sc-vocab-first": "client.vocab_size",
    "sc-vocab-model": "client.vocab_size", "sc-handoff-typo": "deployment.handoff.schedul",
    "sc-routing-value": "pipeline_policy", "sc-top-typo": "emulation_scal",
    "sc-scale-negative": f"emulation_scale: got -1.0; {_SCALE}",
    "sc-scale-text": f"emulation_scale: got 'fast'; {_SCALE}",
    "sc-scale-list": f"emulation_scale: got [8]; {_SCALE}", "sc-front-door": "gateway",
    "sc-duplicate-id": "md0", "sc-no-router": "router", "sc-wrong-arch-role": "decode",
    "sc-missing-role": "main-decode", "sc-api": "client.api", "sc-requires": "requires",
    "sc-network-typo": "jitter_dist", "sc-instance-typo": "datacentre",
    "sc-bad-name": "name", "sc-not-toml": "TOML", "sc-engine-port": "engines[0].port",
    "sc-engine-empty-command": "engines[0].command", "sc-both-kinds": "either",
    "sc-neither": "either",
}
for _s in BAD_SCENARIOS:
    case(f"scenario-validate-{_s}", "scenarios",
         lambda ws, o, s=_s: ["scenario", "validate", str(ws[f"{s}.toml"])], says=_SC_SAYS[_s])
for _s in ("sc-role-typo", "sc-hardware", "sc-sla-typo", "sc-cost-typo", "sc-vocab-model"):
    case(f"replay-scenario-{_s}", "scenarios", lambda ws, o, s=_s: [
        "replay", "--trace", str(ws["good.parquet"]), "--scenario", str(ws[f"{s}.toml"]),
        "--no-emulation", "--out", str(o)], says=_SC_SAYS[_s])
case("scenario-validate-unknown", "scenarios", lambda ws, o: ["scenario", "validate", "nope"],
     says="unknown scenario")
case("scenario-validate-missing-file", "scenarios",
     lambda ws, o: ["scenario", "validate", str(ws.root / "missing.toml")], says="missing.toml")
case("serve-role-typo", "scenarios", lambda ws, o: [
    "serve", "--scenario", str(ws["sc-role-typo.toml"])], says="role")

# ----------------------------------------------------------------------------- options


def _replay(*extra: str, report: bool = False) -> Argv:
    """``replay`` of the good trace; no HTML report unless ``report`` (figures take
    seconds each; the headline table is printed either way)."""
    flags = [] if report else ["--no-report"]
    return lambda ws, o: ["replay", "--trace", str(ws["good.parquet"]), "--out", str(o),
                          *flags, *[x.replace("URL", ws.url) for x in extra]]


for _id, _args, _says in [
    ("target-notaurl", ("--target", "notaurl"), "--target"),
    ("target-ftp", ("--target", "ftp://127.0.0.1/x"), "--target"),
    ("target-port-99999", ("--target", "http://127.0.0.1:99999"), "--target"),
    ("target-port-0", ("--target", "http://127.0.0.1:0"), "--target"),
    ("target-bad-ipv6", ("--target", "http://[::1"), "--target"),
    ("target-port-letters", ("--target", "http://127.0.0.1:abc"), "--target"),
    ("target-no-host", ("--target", "http://:8000"), "--target"),
    ("target-and-scenario", ("--target", "URL/ok", "--scenario", "pdd"), "--scenario"),
    ("speedup-nan", ("--target", "URL/ok", "--speedup", "nan"), "--speedup"),
    ("speedup-inf", ("--target", "URL/ok", "--speedup", "inf"), "--speedup"),
    ("speedup-zero", ("--target", "URL/ok", "--speedup", "0"), "--speedup"),
    ("speedup-negative", ("--target", "URL/ok", "--speedup", "-2"), "--speedup"),
    ("speedup-text", ("--target", "URL/ok", "--speedup", "fast"), "--speedup"),
    ("sample-zero", ("--target", "URL/ok", "--sample", "0"), "--sample"),
    ("sample-two", ("--target", "URL/ok", "--sample", "2"), "--sample"),
    ("sample-nan", ("--target", "URL/ok", "--sample", "nan"), "--sample"),
    ("duration-zero", ("--target", "URL/ok", "--duration", "0"), "--duration"),
    ("duration-text", ("--target", "URL/ok", "--duration", "soon"), "--duration"),
    ("duration-negative", ("--target", "URL/ok", "--duration", "-5s"), "--duration"),
    ("timeout-zero", ("--target", "URL/ok", "--timeout", "0"), "--timeout"),
    ("timeout-zero-ms", ("--target", "URL/ok", "--timeout", "0ms"), "--timeout"),
    ("stall-timeout-zero", ("--target", "URL/ok", "--stall-timeout", "0s"), "--stall-timeout"),
    ("max-concurrency-zero", ("--target", "URL/ok", "--max-concurrency", "0"), "concurrency"),
    ("max-requests-zero", ("--target", "URL/ok", "--max-requests", "0"), "--max-requests"),
    ("window-no-slash", ("--target", "URL/ok", "--window", "3d"), "--window"),
    ("window-zero-length", ("--target", "URL/ok", "--window", "0/0"), "--window"),
    ("window-text", ("--target", "URL/ok", "--window", "a/b"), "--window"),
    ("workers-zero", ("--target", "URL/ok", "--workers", "0"), "--workers"),
    ("unknown-option", ("--target", "URL/ok", "--fast"), "--fast"),
    ("unknown-api", ("--target", "URL/ok", "--api", "grpc"), "--api"),
    ("master-without-locust", ("--target", "URL/ok", "--master"), "--engine locust"),
    ("seed-text", ("--target", "URL/ok", "--seed", "x"), "--seed"),
    ("unknown-scenario", ("--scenario", "nope", "--no-emulation"), "unknown scenario"),
]:
    case(f"replay-{_id}", "options", _replay(*_args), says=_says)
case("replay-no-trace", "options", lambda ws, o: ["replay", "--target", f"{ws.url}/ok"],
     says="--trace")
case("replay-out-is-file", "options", lambda ws, o: [
    "replay", "--trace", str(ws["good.parquet"]), "--target", f"{ws.url}/ok",
    "--out", str(ws["a-file"])], says="is a file, not a folder: name a folder")
case("replay-out-under-file", "options", lambda ws, o: [
    "replay", "--trace", str(ws["good.parquet"]), "--target", f"{ws.url}/ok",
    "--out", str(ws["a-file"] / "sub")], says="is a file, so no folder can be made")
case("replay-resume-not-a-run", "options", lambda ws, o: [
    "replay", "--resume", str(ws["t-dir.parquet"])], says="not a run folder")
case("replay-resume-with-trace", "options", lambda ws, o: [
    "replay", "--resume", str(ws["t-dir.parquet"]), "--trace", str(ws["good.parquet"])],
    says="--resume")
case("replay-worker-no-master", "options", lambda ws, o: ["replay", "--worker"],
     says="--master-host")
case("serve-port-99999", "options", lambda ws, o: ["serve", "--port", "99999"], says="--port")
case("serve-port-0", "options", lambda ws, o: ["serve", "--port", "0"], says="--port")
case("serve-port-shifted-out", "options", lambda ws, o: ["serve", "--port", "65535"],
     says="outside 1-65535")
case("serve-unknown-scenario", "options", lambda ws, o: ["serve", "--scenario", "nope"],
     says="nope")
case("unknown-command", "options", lambda ws, o: ["frobnicate"], says="frobnicate")
case("trace-unknown-command", "options", lambda ws, o: ["trace", "frobnicate"],
     says="frobnicate")
for _t in ("t-epoch-text", "t-epoch-9999"):
    case(f"inspect-plot-{_t}", "traces", lambda ws, o, t=_t: [
        "trace", "inspect", str(ws[f"{t}.parquet"]), "--plot", str(o.parent / f"{t}.png")],
        says="epoch")
case("inspect-plot-into-missing-folder", "options", lambda ws, o: [
    "trace", "inspect", str(ws["good.parquet"]), "--plot", str(ws.root / "no" / "p.png")],
    says="does not exist")

# ------------------------------------------------------------------------ server faults

for _mode, _code, _status, _class in [
    ("ok", 0, "ok", None),
    ("text-only", 0, "ok", None),
    ("done-in-text", 0, "ok", None),
    ("crlf", 0, "ok", None),
    ("split", 0, "ok", None),
    ("done-only", 1, "error", "output_length"),
    ("few", 1, "error", "output_length"),
    ("many", 1, "error", "output_length"),
    ("usage-zero", 1, "error", "output_length"),
    ("usage-huge", 0, "ok", None),  # a count past 64 bits is no count: text chunks count
    ("http500", 1, "error", "http"),
    ("http429", 1, "error", "http"),
    ("bad-json", 1, "error", "stream"),
    ("non-object", 1, "error", "stream"),
    ("error-event", 1, "error", "stream"),
    ("no-done", 1, "error", "stream"),
    ("cut", 1, "error", "stream"),
]:
    case(f"server-{_mode}", "server faults",
         _replay("--target", f"URL/{_mode}", report=_mode == "done-only"),
         code=_code, status=_status, error_class=_class,
         says="every request failed" if _code else "")
case("server-plain-json", "server faults", _replay("--target", "URL/plain-json"), code=1,
     status="error", error_class="stream", says="every request failed",
     message="did not stream; check that it supports stream=true")
case("server-stall", "server faults", _replay("--target", "URL/stall", "--stall-timeout", "0.3s"),
     code=1, status="timeout", error_class="timeout")
case("server-slow-timeout", "server faults", _replay("--target", "URL/slow", "--timeout", "0.5s"),
     code=1, status="censored", error_class="request_limit", says="no request completed")
case("server-refused", "server faults", lambda ws, o: [
    "replay", "--trace", str(ws["good.parquet"]), "--out", str(o), "--no-report", "--target",
    "http://127.0.0.1:9"], code=1, status="error", error_class="connect")
case("server-sglang-at-openai", "server faults", _replay("--target", "URL/ok", "--api", "sglang"),
     code=1, status="error", error_class="output_length")
case("server-huge-numbers", "server faults", _replay("--target", "URL/huge-numbers"),
     code=0, status="ok")
case("server-fail-on-errors-ok", "server faults",
     _replay("--target", "URL/ok", "--fail-on-errors"), code=0, status="ok")
case("server-two-turns-done-only", "server faults", lambda ws, o: [
    "replay", "--trace", str(ws["two-turn.parquet"]), "--out", str(o), "--no-report", "--target",
    f"{ws.url}/done-only", "--on-error", "abort-session"], code=1, status=None,
    error_class=None, says="every request failed")

# ------------------------------------------------------------------------ interruption

for _sig, _name in ((signal.SIGINT, "sigint"), (signal.SIGTERM, "sigterm")):
    case(f"interrupt-{_name}", "interruption", lambda ws, o: [
        "replay", "--trace", str(ws["long.parquet"]), "--target", f"{ws.url}/paced",
        "--no-report", "--out", str(o)], code=130, interrupt=_sig)
case("interrupt-sigint-scenario", "interruption", lambda ws, o: [
    "replay", "--trace", str(ws["long.parquet"]), "--scenario", "colocated", "--no-emulation",
    "--no-report", "--out", str(o)], code=130, interrupt=signal.SIGINT)

# ---------------------------------------------------------------------------- finalize

_FINALIZE_RECORDS = {
    "run-list-line": 2, "run-no-request-id": 2, "run-wrong-type": 2, "run-int-request-id": 2,
    "run-bool-tokens": 2, "run-garbage-line": 2, "run-cut-line": 2, "run-deep-line": 2,
    "run-binary-line": 2, "run-string-list": 2, "run-manifest-list": 2,
    "run-int-past-int64": 2, "run-nan-literal": 3,
    "run-manifest-garbage": 2, "run-no-manifest": 2,
}
for _r in FINALIZE_RUNS:
    case(f"finalize-{_r}", "finalize", lambda ws, o, r=_r: ["finalize", str(ws[r])],
         code=0, records=_FINALIZE_RECORDS[_r])
case("finalize-no-journal", "finalize", lambda ws, o: ["finalize", str(ws["run-no-journal"])],
     says="no journal")
case("finalize-journal-dir", "finalize", lambda ws, o: ["finalize", str(ws["run-journal-dir"])],
     says="journal")
case("finalize-missing-folder", "finalize", lambda ws, o: ["finalize", str(ws.root / "nope")],
     says="journal")
case("finalize-empty-over-good", "finalize",
     lambda ws, o: ["finalize", str(ws["run-empty-over-good"])], says="kept requests.parquet")

# ------------------------------------------------------------------------------ report

for _r, _says in {
    "rep-no-records": "not finalised (killed?); `pddbench finalize",
    "rep-garbage-records": "requests.parquet",
    "rep-no-manifest": "manifest", "rep-garbage-manifest": "manifest",
    "rep-list-manifest": "manifest", "rep-negative-ttft": "ttft_s", "rep-nan-ttft": "ttft_s",
    "rep-no-column": "status",
    "rep-bad-sla": "sla.ttft_ms: unknown key (a typo? or a run folder from a newer pddbench)",
    "rep-bad-cost": "cost",
}.items():
    case(f"report-{_r}", "report", lambda ws, o, r=_r: [
        "report", str(ws[r]), "-o", str(o.parent / f"{o.name}.html")], says=_says)
case("report-zero-rows", "report", lambda ws, o: [
    "report", str(ws["rep-zero-rows"]), "-o", str(o.parent / f"{o.name}.html")], code=0)
case("report-missing-run", "report", lambda ws, o: ["report", str(ws.root / "nope")])
case("report-out-missing-folder", "report", lambda ws, o: [
    "report", str(ws["run-good"]), "-o", str(ws.root / "no" / "r.html")], says="does not exist")
case("report-out-is-dir", "report", lambda ws, o: [
    "report", str(ws["run-good"]), "-o", str(ws["t-dir.parquet"])], says="is a folder")
case("report-bad-sla-option", "report", lambda ws, o: [
    "report", str(ws["run-good"]), "--sla", "ttft=fast"], says="--sla")
case("report-bad-percentiles", "report", lambda ws, o: [
    "report", str(ws["run-good"]), "--percentiles", "50,abc"], says="percentile")
case("report-stdout-not-json", "report", lambda ws, o: [
    "report", str(ws["run-good"]), "-o", "-"], says="JSON")


# --------------------------------------------------------------------------- the test


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory):
    proc = subprocess.Popen([sys.executable, "-m", "tests.badinput.fault_server"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:")
    yield Workspace(tmp_path_factory.mktemp("corpus"), url)
    proc.kill()
    proc.wait()


def _params() -> list[object]:
    out = []
    for c in CASES:
        marks = [pytest.mark.xfail(reason=c.xfail, strict=True)] if c.xfail else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _error_lines(err: str) -> list[str]:
    # the replay's progress lines are not errors (they come after the checks only)
    return [line for line in err.splitlines() if line.strip()]


def _interrupted(argv: list[str], out: Path, sig: int) -> tuple[int, str]:
    """Run ``pddbench ARGV`` as a process; send ``sig`` once its journal has a record."""
    proc = subprocess.Popen([sys.executable, "-m", "pddbench", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in out.glob("*/journal.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, "never sent a request"
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize("c", _params())
def test_bad_input(c: Case, ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    out = ws.out(c.id)
    argv = c.argv(ws, out)  # builds the files it names (maybe a good run first)
    capsys.readouterr()
    if c.interrupt is not None:
        code, err = _interrupted(argv, out, c.interrupt)
        captured = capsys.readouterr()
    else:
        code = main(argv)
        captured = capsys.readouterr()
        err = captured.err
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == c.code, f"exit {code}, expected {c.code}: {err[-2000:]}"
    if c.code == 2:
        lines = _error_lines(err)
        assert len(lines) == c.lines, f"expected {c.lines} line(s), got {lines}"
        assert c.says in lines[0] or (c.lines > 1 and c.says in lines[1]), lines
        if argv[0] == "replay":
            assert not out.exists() or not any(out.iterdir()), "a run folder was created"
        return
    assert c.says in err
    if c.klass == "interruption":  # every planned request has a record, none is lost
        (run,) = [p for p in out.iterdir() if p.is_dir()]
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"
        table = pq.read_table(run / "requests.parquet").to_pandas()
        assert len(table) == manifest["records"] and table.request_id.is_unique
        assert (table.status == "ok").any() and set(table.status) <= {"ok", "cancelled"}
    if c.klass == "server faults":
        (run,) = [p for p in out.iterdir() if p.is_dir()]
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "complete"
        table = pq.read_table(run / "requests.parquet").to_pandas()
        assert len(table) == manifest["planned_requests"]
        if c.status is not None:
            assert (table.status == c.status).all(), table[["status", "error_message"]]
        if c.error_class is not None:
            assert (table.error_class == c.error_class).all(), table.error_message.tolist()
        if c.message is not None:
            assert table.error_message.str.contains(c.message, regex=False).all(), (
                table.error_message.tolist())
        if c.code == 1 and c.status == "censored":  # the harness's limit: no server error
            assert "error rate (%) | 0" in captured.out and "censored (%) | 100" in captured.out
        elif c.code == 1:  # the headline (the report's) shows the error rate of the failed run
            assert "error rate (%) | 100" in captured.out
        if "--no-report" not in argv:
            (report,) = out.glob("report-*.html")
            assert "error rate" in report.read_text()
    if c.records is not None:
        run = Path(argv[-1])
        table = pq.read_table(run / "requests.parquet")
        assert table.num_rows == c.records
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["records"] == c.records
