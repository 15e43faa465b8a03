"""``pddbench twin fit-host`` on a real emulated run (root only): same-dc-pd deployed in its
namespaces replays a small trace; the fit pairs every request with the twin's replay of the
same plan, finds the Python servers' host work (the router parses and hashes every prompt:
milliseconds, never zero), writes it into a link-model file, and a virtual replay with that
file carries it (recorded in the manifest, TTFT longer by what it adds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.traces import chain_trace

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)"),
]
PDDBENCH = [sys.executable, "-m", "pddbench"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PDDBENCH, *args], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def _run_dir(out: Path) -> Path:
    [manifest] = list(out.rglob("manifest.json"))
    return manifest.parent


def test_fit_host_pairs_an_emulated_run_and_the_twin_carries_the_fit(tmp_path: Path) -> None:
    trace = chain_trace(
        tmp_path / "t.parquet", sessions=12, turns=2, session_gap_s=0.4, turn_gap_s=3.0,
        block=512, output_tokens=24,
        hashes=lambda s, t: [(s + 1) * 1000 + b for b in range(16 + 2 * t)],
    )  # fmt: skip
    common = ["--trace", str(trace), "--scenario", "same-dc-pd", "--no-report"]
    _run("replay", *common, "--out", str(tmp_path / "emu"))
    emulated = _run_dir(tmp_path / "emu")
    model = tmp_path / "twin.json"
    fit = _run("twin", "fit-host", str(emulated), "--trace", str(trace), "--link-model", str(model))
    assert "host costs" in fit.stdout, fit.stdout
    host = json.loads(model.read_text())["host"]
    assert host["requests"] == 24  # every request paired
    assert host["route_s"] > 0  # the router parses and hashes each prompt in Python
    assert all(v >= 0 for k, v in host.items() if k.endswith("_s"))

    _run("replay", *common, "--backend", "virtual", "--out", str(tmp_path / "bare"))
    _run("replay", *common, "--backend", "virtual", "--link-model", str(model),
         "--out", str(tmp_path / "hosted"))  # fmt: skip
    hosted = _run_dir(tmp_path / "hosted")
    recorded = json.loads((hosted / "manifest.json").read_text())["replay"]["link_model"]
    assert recorded["calibration"]["host"]["route_s"] == host["route_s"]
    bare = pd.read_parquet(_run_dir(tmp_path / "bare") / "requests.parquet")
    with_host = pd.read_parquet(hosted / "requests.parquet")
    both = bare.merge(with_host, on="request_id", suffixes=("", "_h"))
    added = (both.ttft_router_queue_s_h - both.ttft_router_queue_s).median()
    assert added == pytest.approx(host["route_s"] + host["open_s"] + host["message_s"], rel=0.05)

    # the same rounds on runs the caller makes (what the main job's check fits on its
    # walks' first points): the same costs as fit-host's, and a twin run is refused as the
    # emulated side
    from pddbench.errors import UserError
    from pddbench.twin.calibrate import LinkModelFile
    from pddbench.twin.host import HostCosts
    from pddbench.twin.host_fit import fit_points

    base = LinkModelFile.model_validate_json(model.read_text())
    made: list[Path] = []

    def rerun(costs: HostCosts) -> Path:
        f = tmp_path / f"round{len(made)}.json"
        f.write_text(base.model_copy(update={"host": costs}).model_dump_json())
        out = tmp_path / f"r{len(made)}"
        _run("replay", *common, "--backend", "virtual", "--link-model", str(f), "--out", str(out))
        made.append(_run_dir(out))
        return made[-1]

    bare_dir = _run_dir(tmp_path / "bare")
    fit = fit_points(emulated, bare_dir, rerun, rounds=3)
    assert len(made) == 3 and fit[-1].costs.requests == 24
    for hop in ("route_s", "open_s", "message_s"):
        assert getattr(fit[-1].costs, hop) == pytest.approx(host[hop], rel=0.05, abs=2e-4), hop
    with pytest.raises(UserError, match="virtual run"):
        fit_points(bare_dir, bare_dir, rerun)
