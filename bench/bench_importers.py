"""Benchmark: wall time of the trace importers on the public traces (prints figures).

Target: importing the Mooncake trace (12,031 requests, with session reconstruction)
takes <= 2 s. Also times the WEKA directory (39 conversations, ~5.5 M block hashes) at
the native 64-token blocks and re-blocked to 512, and the Azure CSV.

The agentic formats (Bailian, BurstGPT v2, TraceLab, Dynamo, OpenTelemetry) are not
shipped: they are timed on files generated here in each format's layout (``--rows`` rows,
sessions of 1-8 turns whose prompts grow), so the figures are the importers' own cost, not
a claim about the public files.

Usage: ``.venv/bin/python bench/bench_importers.py [--repeat N] [--traces DIR] [--rows N]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pddbench.workloads.importers import (
    ImportResult,
    import_azure,
    import_bailian,
    import_burstgpt,
    import_dynamo,
    import_mooncake,
    import_otel,
    import_tracelab,
    import_weka,
)

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
MOONCAKE_TARGET_S = 2.0


def _time(fn: Callable[[], ImportResult], repeat: int) -> tuple[float, float, ImportResult]:
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    assert result is not None
    return min(times), times[0], result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--rows", type=int, default=100_000,
                        help="requests in each generated agentic-format file")
    args = parser.parse_args()
    traces: Path = args.traces
    cases: list[tuple[str, Path, Callable[[], ImportResult]]] = [
        (
            "mooncake",
            traces / "mooncake" / "conversation_trace.jsonl",
            lambda: import_mooncake(traces / "mooncake" / "conversation_trace.jsonl"),
        ),
        ("weka (64)", traces / "weka", lambda: import_weka(traces / "weka")),
        ("weka (512)", traces / "weka", lambda: import_weka(traces / "weka", block_size=512)),
        (
            "azure",
            traces / "azure" / "AzureLLMInferenceTrace_conv.csv",
            lambda: import_azure(traces / "azure" / "AzureLLMInferenceTrace_conv.csv"),
        ),
    ]
    print(f"{'trace':<15} {'best_s':>8} {'first_s':>8} {'requests':>9} {'sessions':>9}")
    for name, path, fn in cases:
        if not path.exists():
            print(f"{name:<15} skipped: {path} not found")
            continue
        best, first, result = _time(fn, args.repeat)
        note = ""
        if name == "mooncake":
            verdict = "OK" if best <= MOONCAKE_TARGET_S else "SLOW"
            note = f"  target <= {MOONCAKE_TARGET_S:g} s: {verdict}"
        print(
            f"{name:<15} {best:8.3f} {first:8.3f} {result.num_requests:9d} "
            f"{result.num_sessions:9d}{note}"
        )
    bench_agentic(args.rows, args.repeat)


def _sessions(rows: int) -> list[list[int]]:
    """Input lengths of sessions of 1-8 turns, each turn's prompt the previous one plus."""
    out, n, k = [], 0, 0
    while n < rows:
        turns = min(1 + k % 8, rows - n)
        out.append([400 + 350 * t + 7 * (k % 13) for t in range(turns)])
        n, k = n + turns, k + 1
    return out


def _write_agentic(folder: Path, rows: int) -> dict[str, Path]:
    """One file per agentic format with ``rows`` requests (the layouts of test_formats)."""
    sessions = _sessions(rows)
    paths = {f: folder / f"{f}.{ext}" for f, ext in (
        ("bailian", "jsonl"), ("burstgpt", "csv"), ("tracelab", "jsonl"), ("dynamo", "jsonl"),
        ("otel", "jsonl"))}
    with paths["bailian"].open("w") as bl, paths["burstgpt"].open("w") as bg, \
            paths["tracelab"].open("w") as tl, paths["dynamo"].open("w") as dy, \
            paths["otel"].open("w") as ot:
        bg.write("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                 "Total tokens,Log Type\n")
        chat, next_id = 0, 1
        for s, lengths in enumerate(sessions):
            parent, ids, spans = -1, [], []
            for t, size in enumerate(lengths):
                at = s * 3.0 + t * 20.0
                while len(ids) < -(-size // 16):
                    ids.append(next_id)
                    next_id += 1
                bl.write(json.dumps({"chat_id": chat, "parent_chat_id": parent,
                                     "timestamp": at, "input_length": size,
                                     "output_length": 50, "type": "text", "turn": t + 1,
                                     "hash_ids": ids[: -(-size // 16)]}) + "\n")
                parent, chat = chat, chat + 1
                bg.write(f"{at},s{s},4,GPT-4,{size},50,{size + 50},Conversation log\n")
                stamp = f"2026-01-01T{int(at // 3600) % 24:02d}:{int(at // 60) % 60:02d}:"
                tl.write(json.dumps({
                    "session_id": f"claude:s{s}", "round_index": t, "input_tokens_total": size,
                    "prefix_tokens": lengths[t - 1] if t else 0,
                    "newly_append_tokens": size - (lengths[t - 1] if t else 0),
                    "output_tokens": 50, "tools": [],
                    "timing_events": [
                        {"event_type": "user_message", "timestamp": f"{stamp}{at % 60:06.3f}Z"},
                        {"event_type": "text", "timestamp": f"{stamp}{at % 60:06.3f}Z"}]}) + "\n")
                ms = 1_760_000_000_000 + int(at * 1000)
                dy.write(json.dumps({
                    "schema": "dynamo.request.trace.v1", "event_type": "request_end",
                    "event_time_unix_ms": ms + 4000, "agent_context": {"session_id": f"s{s}"},
                    "request": {"request_id": f"r{s}-{t}", "request_received_ms": ms,
                                "output_tokens": 50,
                                "replay": {"trace_block_size": 16, "input_length": size,
                                           "input_sequence_hashes": ids[: -(-size // 16)]}}})
                         + "\n")
                ns = str(ms * 1_000_000)
                attrs = [("gen_ai.operation.name", {"stringValue": "chat"}),
                         ("gen_ai.usage.input_tokens", {"intValue": str(size)}),
                         ("gen_ai.usage.output_tokens", {"intValue": "50"})]
                spans.append({"traceId": f"t{s}", "spanId": f"c{t}", "name": "chat m",
                              "startTimeUnixNano": ns, "endTimeUnixNano": ns,
                              "attributes": [{"key": k, "value": v} for k, v in attrs]})
            ot.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    return paths


def bench_agentic(rows: int, repeat: int) -> None:
    importers: dict[str, Callable[[Path], ImportResult]] = {
        "bailian": import_bailian, "burstgpt": import_burstgpt, "tracelab": import_tracelab,
        "dynamo": import_dynamo, "otel": import_otel,
    }
    with tempfile.TemporaryDirectory() as folder:
        paths = _write_agentic(Path(folder), rows)
        for name, fn in importers.items():
            best, first, result = _time(lambda f=fn, p=paths[name]: f(p), repeat)
            print(
                f"{name + ' (gen)':<15} {best:8.3f} {first:8.3f} {result.num_requests:9d} "
                f"{result.num_sessions:9d}  {result.num_requests / best:,.0f} req/s"
            )


if __name__ == "__main__":
    main()
