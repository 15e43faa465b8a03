"""SIGKILL of a running replay at random moments: nothing that ended is lost, no server stays.

``pddbench replay`` is killed with SIGKILL at a random moment (several seeds) while
requests are in flight; ``pddbench finalize`` must then recover every request that ended
at least 1 s before the kill (the journal is flushed every second by a timer, not only
when a later record arrives), and no server process the replay started may outlive it by
more than 5 s (PDEATHSIG and the lifeline watcher, :mod:`pddbench.harness.deploy.lifeline`).

* ``--target``: the fault server logs when it finished each response (the exact ground
  truth of which requests ended when).
* ``--scenario colocated --no-emulation``: reference servers (``pddbench.servers.host``)
  on loopback; ground truth from the schedule: a request sent at ``t`` has ended by
  ``t + SERVICE_BOUND_S`` (its records show it takes a fraction of that).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pddbench.workloads.traceio import build_table, write_trace

ROOT = Path(__file__).resolve().parents[2]
PDDBENCH = [sys.executable, "-m", "pddbench"]
SEEDS = (1, 2, 3)
SERVICE_BOUND_S = 1.5
ORPHAN_WAIT_S = 5.0


BURST = 20  # requests in the first second; the rest arrive after a quiet gap
LATE_S = 8.0


def _arrival(i: int, gap_s: float) -> float:
    return gap_s * i if i < BURST else LATE_S + gap_s * (i - BURST)


def _trace(path: Path, n: int, gap_s: float, output: int = 8) -> Path:
    """``n`` one-turn sessions: a burst ``gap_s`` apart, then a quiet gap, then the rest.

    The kill comes in the quiet gap or just after: records that ended in the burst are
    followed by no other record for seconds, so only a timed flush saves them."""
    table = build_table(
        request_id=[f"r{i}" for i in range(n)],
        session_id=[f"s{i}" for i in range(n)],
        turn_index=[0] * n,
        arrival_s=[_arrival(i, gap_s) for i in range(n)],
        input_length=[64] * n,
        output_length=[output] * n,
        block_size=64,
        block_hashes=[[i + 1] for i in range(n)],
        parent_request_id=[None] * n,
        think_time_s=[None] * n,
    )
    return write_trace(table, path)


def _wait(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _run_folder(out: Path) -> Path | None:
    dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    return dirs[0] if dirs else None


def _origin(run: Path) -> float | None:
    try:
        clock = json.loads((run / "manifest.json").read_text()).get("clock") or {}
    except (OSError, ValueError):
        return None
    return clock.get("origin_monotonic_s")


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line holds ``text`` (a run folder's path)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and "pddbench.servers.host" in cmd:
            out.append(int(entry.name))
    return out


def _kill_at_random(argv: list[str], out: Path, seed: int) -> tuple[Path, float, float]:
    """Start the replay, SIGKILL it at a random moment once it sends; (run, kill_s, origin)."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait(lambda: (r := _run_folder(out)) is not None and _origin(r) is not None,
              60, "the replay to start sending")
        run = _run_folder(out)
        assert run is not None
        origin = _origin(run)
        assert origin is not None
        delay = random.Random(seed).uniform(3.0, LATE_S + 1.0)
        _wait(lambda: time.monotonic() - origin >= delay, 10, "the kill moment")
        proc.send_signal(signal.SIGKILL)
        kill_s = time.monotonic() - origin
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return run, kill_s, origin


def _finalize(run: Path) -> set[str]:
    res = subprocess.run([*PDDBENCH, "finalize", str(run)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "recovered"
    table = pq.read_table(run / "requests.parquet").to_pandas()
    assert table.request_id.is_unique
    return set(table.request_id)


@pytest.fixture
def logged_server(tmp_path):
    log = tmp_path / "ends.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.badinput.fault_server", "--log", str(log)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    yield url, log
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_of_a_target_replay_loses_nothing_that_ended(tmp_path, logged_server, seed):
    url, log = logged_server
    trace = _trace(tmp_path / "t.parquet", n=40, gap_s=0.05)
    out = tmp_path / "out"
    run, kill_s, origin = _kill_at_random(
        [*PDDBENCH, "replay", "--trace", str(trace), "--target", f"{url}/paced",
         "--out", str(out)], out, seed)
    recovered = _finalize(run)
    ends = {}
    for line in log.read_text().splitlines():
        rid, t = line.split()
        ends[rid] = float(t) - origin
    due = {rid for rid, end in ends.items() if end <= kill_s - 1.0}
    assert due, "the kill came before any request ended; the test proves nothing"
    assert due <= recovered, f"lost {sorted(due - recovered)} (kill at {kill_s:.2f} s)"


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_of_a_scenario_replay_leaves_no_server(tmp_path, seed):
    trace = _trace(tmp_path / "t.parquet", n=40, gap_s=0.05)
    out = tmp_path / "out"
    run, kill_s, _origin_s = _kill_at_random(
        [*PDDBENCH, "replay", "--trace", str(trace), "--scenario", "colocated",
         "--no-emulation", "--out", str(out)], out, seed)
    killed_at = time.monotonic()
    _wait(lambda: not _processes_mentioning(str(run)), ORPHAN_WAIT_S,
          f"the reference servers of {run} to exit")
    assert time.monotonic() - killed_at <= ORPHAN_WAIT_S
    recovered = _finalize(run)
    # request i is sent at _arrival(i) on the run's clock and takes well under SERVICE_BOUND_S
    due = {f"r{i}" for i in range(40) if _arrival(i, 0.05) + SERVICE_BOUND_S <= kill_s - 1.0}
    assert due, "the kill came before any request ended; the test proves nothing"
    assert due <= recovered, f"lost {sorted(due - recovered)} (kill at {kill_s:.2f} s)"
    table = pq.read_table(run / "requests.parquet").to_pandas()
    assert (table.e2e_s.dropna() < SERVICE_BOUND_S).all()


def test_processes_probe_sees_a_host(tmp_path):
    """The orphan probe is not vacuous: it finds a running host by its config path."""
    cfg = tmp_path / "probe-run" / "deployment.json"
    cfg.parent.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "pddbench.servers.host", str(cfg)]
    )
    try:
        _wait(lambda: bool(_processes_mentioning(str(cfg.parent))), 5, "the probe")
    finally:
        proc.kill()
        proc.wait()
    assert os.path.exists(cfg.parent)
