"""`pddbench replay --target` end to end as real processes: records, signals, crash recovery."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq

from tests.traces import chain_trace

ROOT = Path(__file__).resolve().parents[2]
PDDBENCH = [sys.executable, "-m", "pddbench"]


def _run_dir(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_replay_target_records_every_request_once(tmp_path, server) -> None:
    url = server(tokens_per_chunk=2)
    trace = chain_trace(tmp_path / "t.parquet")
    res = subprocess.run(
        [*PDDBENCH, "replay", "--trace", str(trace), "--target", url, "--out", str(tmp_path / "o")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    run = _run_dir(tmp_path / "o")
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) == 60 and df.request_id.is_unique and (df.status == "ok").all()
    assert (df.output_tokens == 16).all()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["records"] == 60
    assert manifest["trace"]["digest"].startswith("blake2b:")
    assert manifest["scenario"]["deployment"] == "external"
    # theoretical cached tokens: turn t reuses t full blocks of 64 from turn t-1
    by = df.set_index("request_id")
    assert by.loc["s3-t2", "cached_tokens_theoretical"] == 128
    assert "Headline" in res.stdout and "TTFT" in res.stdout
    (report,) = (tmp_path / "o").glob("report-*.html")
    assert report.stat().st_size > 10_000


def test_missing_trace_one_line_hint(tmp_path) -> None:
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(tmp_path / "nope.parquet"),
            "--target",
            "http://127.0.0.1:9",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "pddbench trace synth" in res.stderr


def test_unreachable_target_records_connect_errors(tmp_path) -> None:
    trace = chain_trace(tmp_path / "t.parquet", sessions=3, turns=2)
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--target",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # a run in which nothing succeeded exits 1 (its records are kept)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "every request failed (connect 6); error rate 100.0%" in res.stderr
    df = pq.read_table(_run_dir(tmp_path / "o") / "requests.parquet").to_pandas()
    assert len(df) == 6 and (df.error_class == "connect").all()


def _start_slow_replay(tmp_path: Path, url: str) -> subprocess.Popen:
    trace = chain_trace(tmp_path / "t.parquet", sessions=30, turns=4)
    return subprocess.Popen(
        [*PDDBENCH, "replay", "--trace", str(trace), "--target", url, "--out", str(tmp_path / "o")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for_records(run_parent: Path, at_least: int, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [p for p in run_parent.iterdir() if p.is_dir()] if run_parent.exists() else []
        if runs and (runs[0] / "journal.jsonl").exists():
            lines = (runs[0] / "journal.jsonl").read_text().count("\n")
            if lines >= at_least:
                return runs[0]
        time.sleep(0.1)
    raise AssertionError("replay produced no records in time")


def test_sigint_finalises_partial_results_and_exits_130(tmp_path, server) -> None:
    url = server(tokens_per_chunk=1, delay=0.05)  # 16 tokens -> ~0.8 s per request
    proc = _start_slow_replay(tmp_path, url)
    _wait_for_records(tmp_path / "o", 5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    run = _run_dir(tmp_path / "o")
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) >= 5 and df.request_id.is_unique
    assert (df.status == "cancelled").any()  # in-flight requests were recorded, not lost
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


def test_sigkill_then_finalize_recovers_journal(tmp_path, server) -> None:
    url = server(tokens_per_chunk=1, delay=0.05)
    proc = _start_slow_replay(tmp_path, url)
    _wait_for_records(tmp_path / "o", 8)
    run = _wait_for_records(tmp_path / "o", 12)  # mid-run, more records flushed since
    flushed = (run / "journal.jsonl").read_text().count("\n")
    proc.kill()
    proc.wait(timeout=10)
    assert not (run / "requests.parquet").exists()
    res = subprocess.run(
        [*PDDBENCH, "finalize", str(run)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) >= flushed and df.request_id.is_unique
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "recovered"
    with urllib.request.urlopen(f"{url}/received", timeout=10) as reply:  # in flight too
        assert manifest["sent_requests"] == json.load(reply)["requests"] > len(df)


def test_replay_engine_locust_two_workers(tmp_path, server) -> None:
    url = server(tokens_per_chunk=2)
    trace = chain_trace(tmp_path / "t.parquet", sessions=10, turns=2)
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--engine",
            "locust",
            "--workers",
            "2",
            "--trace",
            str(trace),
            "--target",
            url,
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    run = _run_dir(tmp_path / "o")
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) == 20 and df.request_id.is_unique and (df.status == "ok").all()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["replay"]["engine"] == "locust"
    assert len(manifest["locust"]["workers"]) == 2


def test_replay_worker_needs_master_host() -> None:
    res = subprocess.run(
        [*PDDBENCH, "replay", "--worker"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "--master-host" in res.stderr


def test_sigkill_then_resume_completes_every_request_exactly_once(tmp_path, server) -> None:
    """SIGKILL mid-run, then `replay --resume RUN`: settled records are kept, the rest
    (in flight or not yet sent) are sent, each request appears exactly once, all ok."""
    url = server(tokens_per_chunk=1, delay=0.05)
    proc = _start_slow_replay(tmp_path, url)
    _wait_for_records(tmp_path / "o", 10)
    run = _wait_for_records(tmp_path / "o", 14)  # mid-run, more records flushed since
    proc.kill()
    proc.wait(timeout=10)
    kept = {
        json.loads(line)["request_id"]: json.loads(line)
        for line in (run / "journal.jsonl").read_text().splitlines()
        if line.endswith("}")
    }
    res = subprocess.run(
        [*PDDBENCH, "replay", "--resume", str(run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "resuming" in res.stderr
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) == 30 * 4 and df.request_id.is_unique
    assert (df.status == "ok").all(), df[df.status != "ok"][["request_id", "error_message"]]
    by_id = df.set_index("request_id")
    for rid, row in kept.items():  # settled before the kill: the same record, not re-sent
        if row["status"] == "ok":
            assert by_id.loc[rid, "actual_send_s"] == row["actual_send_s"]
    resumed = df[~df.request_id.isin([r for r, v in kept.items() if v["status"] == "ok"])]
    assert len(resumed) > 0
    # on the run's own timeline: nothing resent is stamped before the point it resumed at
    manifest = json.loads((run / "manifest.json").read_text())
    (entry,) = manifest["resumes"]
    assert (resumed.actual_send_s >= entry["from_s"] - 1e-6).all()
    assert manifest["status"] == "complete" and manifest["records"] == 120
    # every request the server saw was counted, those in flight at the kill included
    with urllib.request.urlopen(f"{url}/received", timeout=10) as reply:
        received = json.load(reply)["requests"]
    assert received > 120  # some were in flight at the kill and sent again
    assert manifest["sent_requests"] == received
    # turn order still holds across the resume
    for rid, row in by_id.iterrows():
        s, t = rid.split("-t")
        if int(t) > 0:
            parent = by_id.loc[f"{s}-t{int(t) - 1}"]
            assert row.actual_send_s >= parent.end_s + 0.02 - 1e-3


def test_resume_refuses_a_complete_run(tmp_path, server) -> None:
    url = server(tokens_per_chunk=4)
    trace = chain_trace(tmp_path / "t.parquet", sessions=2, turns=1)
    out = tmp_path / "o"
    subprocess.run(
        [*PDDBENCH, "replay", "--trace", str(trace), "--target", url, "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    res = subprocess.run(
        [*PDDBENCH, "replay", "--resume", str(_run_dir(out))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "nothing to resume" in res.stderr
    assert "Traceback" not in res.stderr


def test_resume_finds_a_relative_trace_from_where_the_run_started(tmp_path, server) -> None:
    """A run started with a relative trace resumes from any folder (the trace is found
    from where the run was started); with the trace gone, one line says where it was."""
    url = server(tokens_per_chunk=1, delay=0.05)
    chain_trace(tmp_path / "t.parquet", sessions=30, turns=4)
    proc = subprocess.Popen(
        [*PDDBENCH, "replay", "--trace", "t.parquet", "--target", url, "--out", "o"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    run = _wait_for_records(tmp_path / "o", 5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    copy = run.with_name(run.name + "-copy")
    shutil.copytree(run, copy)
    res = subprocess.run(
        [*PDDBENCH, "replay", "--resume", str(run), "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    (tmp_path / "t.parquet").rename(tmp_path / "moved.parquet")
    res = subprocess.run(
        [*PDDBENCH, "replay", "--resume", str(copy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert f"relative to {tmp_path}, where the run was started" in lines[0]
    assert f"put it back at {tmp_path / 't.parquet'}" in lines[0]


def test_a_default_window_replay_ends_when_its_requests_are_settled(tmp_path, server) -> None:
    """A long trace replayed with no selection takes the busiest hour at x10 and a 90 s
    cap; when nothing more is due before the cap (the window's last session starts past
    it) the replay ends once the requests it sent are answered, not at the cap."""
    from pddbench.harness.plan.default_window import DURATION_S, SPEEDUP
    from pddbench.workloads.traceio import build_table, write_trace

    late = (DURATION_S + 10) * SPEEDUP  # in the busiest hour, due after the cap
    arrivals = [0.0, 0.1, 0.2, late, 3700.0]  # the last: outside the hour (a long trace)
    n = len(arrivals)
    trace = write_trace(
        build_table(
            request_id=[f"r{i}" for i in range(n)],
            session_id=[f"s{i}" for i in range(n)],
            turn_index=[0] * n,
            arrival_s=arrivals,
            input_length=[64] * n,
            output_length=[8] * n,
            block_size=64,
            block_hashes=[[i + 1] for i in range(n)],
        ),
        tmp_path / "t.parquet",
    )
    url = server(tokens_per_chunk=1)
    began = time.monotonic()
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--target",
            url,
            "--out",
            str(tmp_path / "o"),
            "--no-report",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DURATION_S + 60,
    )
    took = time.monotonic() - began
    assert res.returncode == 0, res.stderr
    assert "busiest hour" in res.stderr
    run = _run_dir(tmp_path / "o")
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert sorted(df.request_id) == ["r0", "r1", "r2"] and (df.status == "ok").all()
    last_answer = float(df.end_s.max())
    assert last_answer < 5.0
    # ended soon after the last answer, not at the cap (it took >= 90 s before)
    assert took < DURATION_S / 3, f"the replay took {took:.1f} s"
