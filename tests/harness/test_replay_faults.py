"""Faults during an emulated `pddbench replay --scenario pdd` (root only).

* An instance dies mid-run (SIGKILL to md0's host process): the replay carries on with md1,
  the requests md0 was serving are recorded with an error class, nothing else is lost, and
  the run completes with exit status 0 — per ``replay_main``, failed *requests* are data,
  not a failed run (status 1 is for a scenario that could not be deployed, 130 for an
  interrupted run).
* The harness gets SIGTERM mid-run: partial results are finalised, the manifest says
  ``interrupted``, the exit status is 130, and the emulated namespaces are gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.harness.test_replay_emulated import (
    PDDBENCH,
    ROOT,
    SKIP_REASON,
    RunWatch,
    light_scenario,
    run_watch,
)
from tests.traces import chain_trace

pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
__all__ = ["run_watch"]  # the fixture, shared with test_replay_emulated

SESSIONS = 16
TURNS = 3
BLOCK = 512
OUTPUT_TOKENS = 160  # ~3 s of decode per request on H20: many requests in flight at once


def busy_trace(path: Path) -> Path:
    """SESSIONS concurrent sessions of TURNS turns, short prompts, long-ish outputs."""
    return chain_trace(
        path,
        sessions=SESSIONS,
        turns=TURNS,
        session_gap_s=0.25,
        turn_gap_s=4.0,
        think_s=0.2,
        block=BLOCK,
        output_tokens=OUTPUT_TOKENS,
        hashes=lambda s, t: [(s + 1) * 10_000 + b for b in range(4 + t)],
    )


def _start(trace: Path, out: Path, watch: RunWatch) -> subprocess.Popen[str]:
    watch.out_dirs.append(out)
    scenario = light_scenario("pdd", trace.parent)
    proc = subprocess.Popen(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--scenario",
            str(scenario),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    watch.pids.append(proc.pid)
    return proc


def _wait_for_records(out: Path, proc: subprocess.Popen[str], at_least: int) -> Path:
    """The run folder once its journal holds ``at_least`` records (deploying takes a while)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        for journal in out.glob("*/journal.jsonl"):
            if journal.read_text().count("\n") >= at_least:
                return journal.parent
        time.sleep(0.1)
    raise AssertionError("the replay produced no records in time")


def _host_pid(run: Path, instance: str) -> int:
    """PID of the host process serving ``instance`` of *this* run (its config is in ``run``)."""
    marker = str(run / f"host-{instance}.json").encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in argv:
            return int(entry.name)
    raise AssertionError(f"no host process for {instance} of {run}")


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def test_instance_killed_mid_run(tmp_path, run_watch) -> None:
    out = tmp_path / "o"
    proc = _start(busy_trace(tmp_path / "t.parquet"), out, run_watch)
    run = _wait_for_records(out, proc, at_least=4)
    os.kill(_host_pid(run, "md0"), signal.SIGKILL)
    code, err = _finish(proc)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    df = pq.read_table(run / "requests.parquet").to_pandas()
    # nothing lost: every request of the trace was sent (on-error: continue) and recorded
    assert df.request_id.is_unique
    assert manifest["planned_requests"] == SESSIONS * TURNS
    assert manifest["sent_requests"] == manifest["records"] == len(df) == SESSIONS * TURNS
    failed = df[df.status != "ok"]
    # the requests md0 was serving (and only failures of that kind) are recorded as such
    assert len(failed) >= 1, "md0 was serving nothing when it died: the test proved nothing"
    assert set(failed.error_class) <= {"stream", "connect"}, failed.error_class.tolist()
    assert failed.error_message.str.contains("md0").all(), failed.error_message.tolist()
    ok = df[df.status == "ok"]
    assert ok.integrity_ok.all() and (ok.output_tokens == OUTPUT_TOKENS).all()
    # the run went on with md1: requests sent after the kill completed there
    after = ok[ok.actual_send_s > failed.end_s.max()]
    assert len(after) >= 1
    assert all(json.loads(t)["instances"].get("MD") == "md1" for t in after.server_timing)


def test_sigterm_finalises_partial_results(tmp_path, run_watch) -> None:
    out = tmp_path / "o"
    proc = _start(busy_trace(tmp_path / "t.parquet"), out, run_watch)
    run = _wait_for_records(out, proc, at_least=3)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc, timeout=60)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert df.request_id.is_unique and len(df) == manifest["records"] >= 3
    assert len(df) < SESSIONS * TURNS
    assert (df.status == "cancelled").any()  # in-flight requests recorded, not lost
    # (run_watch checks that the run's namespaces are gone)
