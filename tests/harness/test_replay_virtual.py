"""``--backend virtual`` end to end through the CLI: the twin in place of a deployment.

No servers, no namespaces, no root: ``pddbench replay`` and ``pddbench capacity`` replay a
reference-server scenario in virtual time into ordinary run folders, deterministically,
and every report of such a run says VIRTUAL TIME; the combinations that cannot be virtual
are refused with one line and exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.traces import chain_trace

ROOT = Path(__file__).resolve().parents[2]
PDDBENCH = [sys.executable, "-m", "pddbench"]
pytestmark = pytest.mark.timeout(240)


def _trace(path: Path) -> Path:
    return chain_trace(
        path,
        sessions=4,
        turns=2,
        session_gap_s=0.5,
        block=512,
        output_tokens=8,
        hashes=lambda s, t: [100 * s + k for k in range(t + 2)],
    )


def _pddbench(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PDDBENCH, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _virtual_replay(trace: Path, out: Path, *extra: str) -> Path:
    args = ["replay", "--trace", str(trace), "--scenario", "pdd", "--backend", "virtual"]
    proc = _pddbench(*args, "--out", str(out), *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Headline — VIRTUAL TIME (the twin): pdd" in proc.stdout
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_virtual_replay_writes_a_labelled_run_folder(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "out"
    run = _virtual_replay(trace, out)
    table = pq.read_table(run / "requests.parquet")
    assert table.num_rows == 8
    assert set(table.column("status").to_pylist()) == {"ok"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["replay"]["backend"] == "virtual"
    assert "deployment" not in manifest and manifest["emulation"] is None  # nothing deployed
    assert manifest["scenario"]["emulation_scale"] == 1.0  # full scale, no probe

    (html_path,) = out.glob("report-*.html")
    html = html_path.read_text()
    assert html.index('id="time-banner"') < html.index("<nav>")  # first screen, on top
    assert "Headline — VIRTUAL TIME" in html
    md_out, json_out = tmp_path / "r.md", tmp_path / "r.json"
    for fmt, path in (("md", md_out), ("json", json_out)):
        done = _pddbench("report", str(run), "--format", fmt, "-o", str(path), timeout=120)
        assert done.returncode == 0, done.stderr
    md_lines = md_out.read_text().splitlines()
    assert md_lines[2].startswith("> **VIRTUAL TIME: replayed through the twin")
    assert "Headline — VIRTUAL TIME (the twin): pdd" in md_out.read_text()
    data = json.loads(json_out.read_text())
    assert data["virtual_time"] == ["pdd"] and "VIRTUAL TIME" in data["time_banner"]
    assert data["wan_banner"] is None  # a modelled WAN is not a loopback run


def test_the_same_virtual_replay_twice_gives_identical_records(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet")
    runs = [_virtual_replay(trace, tmp_path / f"o{k}", "--no-report") for k in range(2)]
    a, b = (pq.read_table(r / "requests.parquet") for r in runs)
    assert a.num_rows == 8 and a.column_names == b.column_names
    for name in a.column_names:
        assert a.column(name).equals(b.column(name)), name
    first, second = ((r / "requests.parquet").read_bytes() for r in runs)
    assert first == second  # the file itself, byte for byte


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--target", "http://127.0.0.1:9"], "not with --target"),
        (["--scenario", "pdd", "--engine", "locust"], "not with --engine locust"),
        (["--scenario", "llamacpp-tiny"], "scenario llamacpp-tiny runs real engines"),
    ],
)
def test_what_cannot_be_virtual_exits_2_with_one_line(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    trace = _trace(tmp_path / "t.parquet")
    out = tmp_path / "out"
    args = ["replay", "--trace", str(trace), "--backend", "virtual", "--out", str(out)]
    proc = _pddbench(*args, *extra, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not out.exists()  # refused before any run folder


def test_virtual_capacity_walk_ends_with_a_verdict(tmp_path: Path) -> None:
    trace = chain_trace(tmp_path / "t.parquet", sessions=400, turns=2, session_gap_s=0.1)
    out = tmp_path / "o"
    ladder = ["--start", "1", "--points", "2", "--bisect", "0", "--min-requests", "0"]
    point = ["--point-duration", "6s", "--warmup", "1s"]
    proc = _pddbench(
        "capacity",
        "--trace",
        str(trace),
        "--scenario",
        "same-dc-pd",
        "--backend",
        "virtual",
        *ladder,
        *point,
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict = json.loads((out / "capacity.json").read_text())
    points = verdict["points"]
    assert len(points) == 2 and all(p["requests"] > 0 for p in points)
    for p in points:  # nothing was waited on, and the record says why (no faked settle time)
        assert p["backlog"] is None and p["settle_s"] is None
        assert p["settled"].startswith("virtual time: the twin runs every request")
    manifests = [json.loads(m.read_text()) for m in out.glob("*-same-dc-pd-x*/manifest.json")]
    assert len(manifests) == 2
    assert all(m["replay"]["backend"] == "virtual" for m in manifests)
    assert all("deployment" not in m for m in manifests)
