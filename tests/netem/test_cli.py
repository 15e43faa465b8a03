"""`pddbench netem` commands end to end (root only): probe, up/down, status, cleanup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pddbench.errors import UserError
from pddbench.harness.cli.netem import netem
from pddbench.netem import nsutil

from .conftest import needs_root, new_test_run_id

pytestmark = [needs_root, pytest.mark.root]

SCENARIO = """
[network]
scale = 10

[[network.sites]]
name = "east"
instances = ["prefill-0"]

[[network.sites]]
name = "west"
instances = ["decode-0"]

[[network.links]]
a = "east"
b = "west"
rate_mbit = 1000
delay_ms = 5
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    return path


def test_probe_prints_a_verdict_and_writes_links_parquet(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "links.parquet"
    args = ["probe", "--scenario", str(scenario), "--run-id", new_test_run_id()]
    args += ["--samples", "30", "--bulk-seconds", "0", "--out", str(out)]
    # loose tolerances: a loaded test machine delays the prober; bench_netem.py is precise
    args += ["--rtt-tolerance-ms", "50", "--p99-tolerance-ms", "500"]
    result = CliRunner().invoke(netem, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "east-west: RTT p50" in result.output and "all links within tolerance" in result.output
    assert "scale 1/10" in result.output
    table = pq.read_table(out)
    assert table.num_rows == 1 and table.column("scale").to_pylist() == [10.0]
    assert table.column("rate_a_to_b_mbit").to_pylist() == [100.0]


def test_probe_failure_is_a_user_error_with_details(scenario: Path) -> None:
    args = ["probe", "--scenario", str(scenario), "--run-id", new_test_run_id()]
    args += ["--samples", "10", "--bulk-seconds", "0", "--rtt-tolerance-ms", "0.000001"]
    result = CliRunner().invoke(netem, args)
    assert isinstance(result.exception, UserError)
    assert result.exception.exit_code == 1 and "RTT p50" in str(result.exception)


def test_bad_scenario_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[network]\nsites = [{name = "a"}]\nlinks = [{a = "a", b = "zz"}]\n')
    result = CliRunner().invoke(netem, ["probe", "--scenario", str(bad)])
    assert isinstance(result.exception, UserError)
    assert "unknown site 'zz'" in str(result.exception)


def test_up_holds_the_network_until_down(scenario: Path) -> None:
    run_id = new_test_run_id()
    code = "from pddbench.harness.cli.netem import netem; netem()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "up", "--scenario", str(scenario), "--run-id", run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("up;"):
                break
        text = "".join(lines)
        assert "prefill-0" in text and "198.18.1.10" in text, text
        assert len(nsutil.list_netns(f"pddb{run_id}-")) == 7  # 2 switches, 2 probes, 3 hosts
        status = CliRunner().invoke(netem, ["status"])
        assert f"run {run_id}: owner pid {proc.pid} alive" in status.output
        down = CliRunner().invoke(netem, ["down", run_id])
        assert down.exit_code == 0, down.output
        rest = proc.stdout.read()
        assert proc.wait(timeout=15) == 0, text + rest
        assert nsutil.list_netns(f"pddb{run_id}") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cleanup_command_reports() -> None:
    result = CliRunner().invoke(netem, ["cleanup", "pddbtqzz"])
    assert result.exit_code == 0 and result.output.startswith("removed 0 namespaces")
