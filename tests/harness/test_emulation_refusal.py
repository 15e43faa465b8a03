"""Refuse to lie: no emulated WAN → replay refuses (exit 2, one line) or, with
``--no-emulation``, every report of the runs says so on its first screen.

The refusal runs ``pddbench replay`` as a real process without CAP_NET_ADMIN/SYS_ADMIN
(``setpriv`` drops them, so root is "not root" for namespaces), and in-process through the
capability probe's seam (``emulation_problem``) where ``setpriv`` is missing. The banner
test replays the real ``pdd`` reference servers on loopback and renders the real reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pddbench.errors import UserError
from tests.traces import chain_trace

PDDBENCH = [sys.executable, "-m", "pddbench"]


def small_trace(path: Path, sessions: int = 3) -> Path:
    return chain_trace(
        path,
        sessions=sessions,
        turns=1,
        session_gap_s=0.1,
        block=512,
        output_tokens=8,
        hashes=lambda s, _t: [100 * s, 100 * s + 1],
    )


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_replay_without_network_privileges_exits_2_with_one_line(tmp_path: Path) -> None:
    trace = small_trace(tmp_path / "t.parquet")
    drop = ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin"]
    out = tmp_path / "out"
    proc = subprocess.run(
        [*drop, *PDDBENCH, "replay", "--trace", str(trace), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "cannot emulate the WAN" in lines[0] and "needs root" in lines[0]
    assert "--no-emulation" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists() or not any(p.is_dir() for p in out.iterdir())  # no run started


def test_the_capability_seam_refuses_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pddbench.harness.cli.replay import replay
    from pddbench.harness.jobs import run_system

    monkeypatch.setattr(run_system, "emulation_problem", lambda: "this kernel can delay nothing")
    trace = small_trace(tmp_path / "t.parquet")
    args = ["--trace", str(trace), "--scenario", "pdd", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(replay, args)
    assert isinstance(result.exception, UserError) and result.exception.exit_code == 2
    assert "cannot emulate the WAN: this kernel can delay nothing" in str(result.exception)


def test_no_emulation_runs_carry_the_banner_in_every_report(tmp_path: Path) -> None:
    trace = small_trace(tmp_path / "t.parquet")
    out = tmp_path / "out"
    args = ["--trace", str(trace), "--scenario", "pdd", "--no-emulation", "--out", str(out)]
    proc = subprocess.run(
        [*PDDBENCH, "replay", *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Headline — WAN NOT EMULATED (loopback): pdd" in proc.stdout  # printed headline
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["emulation"] == {
        "applicable": True,
        "emulated": False,
        "reason": "--no-emulation",
    }
    (html_path,) = out.glob("report-*.html")
    html = html_path.read_text()
    banner = html.index('id="wan-banner"')
    assert banner < html.index("<nav>") < html.index('id="headline"')  # first screen, on top
    assert "WAN NOT EMULATED: the servers ran on loopback (--no-emulation)" in html
    assert "Headline — WAN NOT EMULATED" in html

    md_out = tmp_path / "r.md"
    json_out = tmp_path / "r.json"
    for fmt, path in (("md", md_out), ("json", json_out)):
        done = subprocess.run(
            [*PDDBENCH, "report", str(run), "--format", fmt, "-o", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    md_lines = md_out.read_text().splitlines()
    assert md_lines[0].startswith("# ") and md_lines[2].startswith("> **WAN NOT EMULATED")
    data = json.loads(json_out.read_text())
    assert data["wan_emulated"] is False and "WAN NOT EMULATED" in data["wan_banner"]
    assert data["emulation"]["pdd"]["reason"] == "--no-emulation"
