"""Benchmark: wall time of the trace importers on the public traces (prints figures).

Target: importing the Mooncake trace (12,031 requests, with session reconstruction)
takes <= 2 s. Also times the WEKA directory (39 conversations, ~5.5 M block hashes) at
the native 64-token blocks and re-blocked to 512, and the Azure CSV.

Usage: ``.venv/bin/python bench/bench_importers.py [--repeat N] [--traces DIR]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from pddbench.workloads.importers import (
    ImportResult,
    import_azure,
    import_mooncake,
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
    print(f"{'trace':<12} {'best_s':>8} {'first_s':>8} {'requests':>9} {'sessions':>9}")
    for name, path, fn in cases:
        if not path.exists():
            print(f"{name:<12} skipped: {path} not found")
            continue
        best, first, result = _time(fn, args.repeat)
        note = ""
        if name == "mooncake":
            verdict = "OK" if best <= MOONCAKE_TARGET_S else "SLOW"
            note = f"  target <= {MOONCAKE_TARGET_S:g} s: {verdict}"
        print(
            f"{name:<12} {best:8.3f} {first:8.3f} {result.num_requests:9d} "
            f"{result.num_sessions:9d}{note}"
        )


if __name__ == "__main__":
    main()
