"""TTFT decomposition: the parts of each request add up to its TTFT (unit and end to end)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pddbench.harness.analysis.ttft_parts import (
    PARTS,
    ClockJoin,
    decompose,
    decompose_rows,
    from_record,
)
from pddbench.harness.experiments.decomposition import decompose_run
from pddbench.harness.rundir.manifest import RunManifest
from tests.harness.test_emulation_refusal import small_trace

JOIN = ClockJoin(origin_monotonic_s=1000.0, origin_wall_s=5000.0, host="vm")


def story(**over: object) -> str:
    s = {
        "first_token_origin": "MD",
        "times": {
            "arrival": 1010.001,
            "routed": 1010.002,
            "prefill_start": 1010.010,
            "prefill_end": 1010.060,
            "first_token": 1010.100,
        },
        "kv_landed": {"MD": {"path": "wan", "start": 1010.070, "end": 1010.075}},
        "clocks": {"p0": {"host": "vm", "mono": 999.0, "wall": 4999.0}},
        "tokens_by_origin": {"MD": 10},
    }
    s.update(over)
    return json.dumps(s)


def test_direct_path_parts() -> None:
    p = decompose(story(), 10.0, 10.103, JOIN)
    assert p.to_router == pytest.approx(0.001) and p.router_queue == pytest.approx(0.001)
    assert p.p_queue == pytest.approx(0.008) and p.prefill == pytest.approx(0.050)
    assert p.kv_transfer == pytest.approx(0.010) and p.kv_landing == pytest.approx(0.005)
    assert p.first_decode == pytest.approx(0.025) and p.to_client == pytest.approx(0.003)
    assert p.kv_path == "wan" and p.first_origin == "MD"
    assert p.total() == pytest.approx(0.103, abs=1e-9)


def test_overlap_counts_once_and_wall_join_for_another_host() -> None:
    # KV landed before prefill "ended" (streamed per chunk): clamped, the sum still holds
    s = story(kv_landed={"MD": {"path": "wan", "start": 1010.050, "end": 1010.055}})
    p = decompose(s, 10.0, 10.103, JOIN)
    assert p.kv_transfer == 0.0 and p.kv_landing == 0.0
    assert p.total() == pytest.approx(0.103, abs=1e-9)
    # servers on another host whose monotonic clock is 500 s off: joined by the wall anchor
    other = ClockJoin(origin_monotonic_s=1000.0, origin_wall_s=5000.0, host="client-box")
    shifted = json.loads(story())
    shifted["times"] = {k: v + 500 for k, v in shifted["times"].items()}
    shifted["kv_landed"]["MD"].update(start=1510.070, end=1510.075)
    shifted["clocks"] = {"p0": {"host": "server-box", "mono": 1499.0, "wall": 4999.0}}
    q = decompose(json.dumps(shifted), 10.0, 10.103, other)
    assert q.to_router == pytest.approx(0.001) and q.total() == pytest.approx(0.103, abs=1e-9)


def test_not_decomposable_is_nan_not_an_error() -> None:
    assert math.isnan(decompose(None, 1.0, 2.0, JOIN).total())
    assert math.isnan(decompose("{not json", 1.0, 2.0, JOIN).total())
    assert math.isnan(decompose(story(times={}), 1.0, 2.0, JOIN).total())
    rows = [
        {"status": "error", "server_timing": story(), "actual_send_s": 10.0, "first_token_s": None}
    ]
    assert math.isnan(decompose_rows(rows, JOIN)[0].total())


def test_reference_server_parts_add_up_to_ttft_within_2ms(tmp_path: Path) -> None:
    """Real pdd servers on loopback, direct and relay pipelines: every ok request's parts."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pddbench",
            "replay",
            "--trace",
            str(small_trace(tmp_path / "t.parquet", sessions=4)),
            "--scenario",
            "pdd",
            "--scenario",
            "pdd-always-relay",
            "--no-emulation",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = sorted(p for p in out.iterdir() if (p / "manifest.json").exists())
    assert len(runs) == 2
    origins = set()
    for run in runs:
        rows = pq.read_table(run / "requests.parquet").to_pylist()
        derived = decompose_rows(rows, ClockJoin.of_manifest(RunManifest.load(run)))
        ok = [(r, d) for r, d in zip(rows, derived, strict=True) if r["status"] == "ok"]
        assert len(ok) == 4
        for r, d in ok:
            recorded = from_record(r)  # the client's record columns, joined by its own clock
            for p in (recorded, d):
                assert abs(p.total() - r["ttft_s"]) <= 0.002, (r["request_id"], p)
                assert min(getattr(p, k) for k in PARTS) >= -0.002, p  # clocks joined
                assert p.prefill > 0
            assert r["kv_path"] in ("wan", "intra")  # P -> MD over the WAN, P -> RLD inside A
            origins.add(recorded.first_origin)
        d = decompose_run(run)
        assert d is not None and d.decomposed == d.ok == 4 and d.max_sum_error_s <= 0.002
    assert origins == {"MD", "RLD"}
