"""Real engines end to end: install (idempotent, cached), `pddbench replay --scenario`, checks.

For each engine (vLLM CPU, llama.cpp) a session fixture installs it into the engine cache
(``$PDDBENCH_ENGINE_CACHE``, default ``~/.cache/pddbench/engines``; a second run on the
same machine finds it there in seconds), then runs ``pddbench replay --scenario
<engine>-tiny --no-emulation`` on a small synthetic agentic trace (``engine_ci.toml``:
7 sessions, 41 requests, 5-9K-token contexts, 128-token blocks). The tests then hold the
run to the bar: every request completes; server-reported cached tokens equal the
trace-theoretical ones at the engine's block size; high-hit turns have a clearly lower
TTFT than first turns; the engine's own prefix-cache counters (scraped into
``server_metrics.parquet``) equal the records' sums.

Skip all with ``PDDBENCH_SKIP_REAL_ENGINES=1``; choose with
``PDDBENCH_REAL_ENGINES=vllm,llamacpp`` (the default: both).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pddbench.harness.engines.install import install
from tests.engines.conftest import PDDBENCH, ROOT

ENGINES = ("vllm", "llamacpp")

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timeout(3600),  # a first install on a fresh, busy 2-core machine is slow
    pytest.mark.skipif(
        os.environ.get("PDDBENCH_SKIP_REAL_ENGINES", "") not in ("", "0"),
        reason="PDDBENCH_SKIP_REAL_ENGINES is set",
    ),
]


def _selected(engine: str) -> bool:
    wanted = os.environ.get("PDDBENCH_REAL_ENGINES", ",".join(ENGINES))
    return engine in {w.strip() for w in wanted.split(",")}


@dataclass
class EngineRun:
    engine: str
    folder: Path
    records: pd.DataFrame
    manifest: dict[str, object]
    install_s: float
    replay_s: float


def _replay(engine: str, trace: Path, out: Path) -> EngineRun:
    if not _selected(engine):
        pytest.skip(f"{engine} not in PDDBENCH_REAL_ENGINES")
    start = time.monotonic()
    install(engine, log=lambda line: print(f"[{engine}] {line}", flush=True))
    install_s = time.monotonic() - start
    start = time.monotonic()
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--scenario",
            f"{'vllm-cpu' if engine == 'vllm' else engine}-tiny",
            "--no-emulation",
            "--speedup",
            "4",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    replay_s = time.monotonic() - start
    print(f"[{engine}] install check {install_s:.1f} s, replay (with start-up) {replay_s:.1f} s")
    assert res.returncode == 0, res.stderr[-3000:]
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    records = pq.read_table(folder / "requests.parquet").to_pandas()
    manifest = json.loads((folder / "manifest.json").read_text())
    return EngineRun(engine, folder, records, manifest, install_s, replay_s)


@pytest.fixture(scope="session")
def vllm_run(ci_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineRun:
    return _replay("vllm", ci_trace, tmp_path_factory.mktemp("vllm-out"))


@pytest.fixture(scope="session")
def llamacpp_run(ci_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> EngineRun:
    return _replay("llamacpp", ci_trace, tmp_path_factory.mktemp("llamacpp-out"))


@pytest.fixture(params=ENGINES)
def run(request: pytest.FixtureRequest) -> EngineRun:
    return request.getfixturevalue(f"{request.param}_run")


#: Least share of requests whose reported cached tokens equal the theory. vLLM's global
#: block cache measured 100% in every run here. llama.cpp keeps a prefix per slot: a busy
#: slot cannot lend its prefix, and a first turn that shares only the system prompt takes
#: over another session's slot, so overlapping sessions miss a few hits the trace's global
#: cache has (measured 92.7-100%, mean 96.6%, over 5 runs of this trace).
AGREEMENT = {"vllm": 0.95, "llamacpp": 0.85}


def test_replay_completes_on_the_real_engine(run: EngineRun) -> None:
    df = run.records
    assert len(df) == 41 and (df.status == "ok").all(), df[df.status != "ok"].error_message
    assert run.manifest["status"] == "complete"
    assert (df.output_tokens == df.expected_output_tokens).all()  # ignore_eos, exact length
    assert df.cached_tokens_reported.notna().all()


def test_reported_cached_tokens_agree_with_the_trace_at_the_engine_block(run: EngineRun) -> None:
    df = run.records
    block = 128  # vLLM CPU's block; also the trace's (engine_ci.toml), llama.cpp's granularity
    equal = df.cached_tokens_reported == df.cached_tokens_theoretical
    print(f"[{run.engine}] exact agreement {equal.mean():.1%} of {len(df)} requests")
    assert equal.mean() >= AGREEMENT[run.engine], df[~equal][
        ["request_id", "input_tokens", "cached_tokens_theoretical", "cached_tokens_reported"]
    ]
    assert (df.cached_tokens_reported <= df.cached_tokens_theoretical + block - 1).all()
    if run.engine == "vllm":
        assert (df.cached_tokens_reported % block == 0).all()


def test_high_hit_turns_have_clearly_lower_ttft_than_first_turns(run: EngineRun) -> None:
    df = run.records
    hit = df.cached_tokens_reported / df.input_tokens
    first = df[df.turn_index == 0].ttft_s.median()
    high = df[(df.turn_index > 0) & (hit >= 0.9)].ttft_s.median()
    print(f"[{run.engine}] TTFT median: first turns {first:.3f} s, >=90% hit {high:.3f} s")
    assert high < 0.6 * first


def test_server_prefix_cache_counters_agree_with_the_records(run: EngineRun) -> None:
    path = run.folder / "server_metrics.parquet"
    assert path.exists(), "the replay wrote no server_metrics.parquet"
    sm = pq.read_table(path).to_pandas()
    last = sm[sm.t_s == sm.t_s.max()]  # the final scrape, after the last request

    def final(metric: str) -> float:
        rows = last[last.metric == metric]
        assert not rows.empty, f"{metric} missing from the final scrape"
        return float(rows.value.sum())

    df = run.records  # a fresh engine: its counters cover exactly this replay
    assert final("prefix_cache_hit_tokens_total") == df.cached_tokens_reported.sum()
    assert final("prefix_cache_query_tokens_total") == df.input_tokens.sum()
    assert final("generation_tokens_total") == df.output_tokens.sum()
    assert final("requests_running") == 0
