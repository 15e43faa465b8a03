"""The twin's calibration: the pure fit from measurements to link parameters, the file,
``--link-model`` on a virtual run, and the command's refusal without root.

Nothing here measures a link: the command itself needs root and namespaces (run it by
hand: ``sudo pddbench twin calibrate --scenario pdd``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.folder import new_run
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.netem.probe import LinkProbe
from pddbench.netem.slowstart import PAYLOAD_SHARE
from pddbench.netem.topology_config import NetworkConfig
from pddbench.twin.backend import drive_virtual
from pddbench.twin.calibrate import (
    LinkModelFile,
    Measured,
    TransferSample,
    fit_link,
    load_link_model,
    transfer_sizes_tokens,
)
from pddbench.twin.links import PathParams
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
SCALE = 100.0  # the emulated link carried 1/100 of the bytes at 1/100 of the rate


def _net() -> NetworkConfig:
    sc = load_scenario("pdd").model_copy(update={"emulation_scale": 1.0})
    return sc.network_config()  # wan: 100 Gbit/s, 15 ms, ±3 ms each way


def _probe(rtt_p50: float, rtt_std: float, goodput: float | None) -> LinkProbe:
    return LinkProbe(
        run_id="t", link="wan", a="dc-a", b="dc-b", scale=SCALE,
        backend_a_to_b="nfqueue", backend_b_to_a="nfqueue",
        rtt_samples=200, rtt_lost=0, rtt_min_ms=rtt_p50 - 5, rtt_p50_ms=rtt_p50,
        rtt_p90_ms=rtt_p50 + 3, rtt_p99_ms=rtt_p50 + 5, rtt_max_ms=rtt_p50 + 6,
        rtt_mean_ms=rtt_p50, rtt_std_ms=rtt_std, expected_rtt_p50_ms=30.0,
        expected_rtt_p99_ms=35.0, rate_a_to_b_mbit=1000.0, rate_b_to_a_mbit=1000.0,
        goodput_a_to_b_mbit=goodput, goodput_b_to_a_mbit=goodput,
        loss_a_to_b_pct=0.0, loss_b_to_a_pct=0.0,
    )  # fmt: skip


def _line(setup_s: float, bytes_per_s: float, sizes: list[int]) -> list[TransferSample]:
    return [TransferSample(nbytes=n, seconds=setup_s + n / bytes_per_s) for n in sizes]


def test_the_fit_recovers_a_line_and_puts_it_back_at_scale_1() -> None:
    link = _net().links[0]
    sizes = [480_000, 3_800_000, 15_200_000]
    # on the scaled link: 118.75 MB/s (950 Mbit/s), 16 ms from first byte to last
    transfers = {
        "a_to_b": _line(0.016, 118.75e6, sizes),
        "b_to_a": _line(0.0155, 118.75e6, sizes),
    }
    ab, ba = fit_link(link, _probe(30.4, 2.5, 940.0), transfers, SCALE)
    # the line is the goodput's; one connection fills it, so no cap per flow
    assert ab.rate_source == "goodput" and ab.rate_mbit == pytest.approx(94_000.0)
    assert ba.rate_mbit == pytest.approx(94_000.0) and ab.flow_rate_mbit == pytest.approx(95_000)
    assert ab.delay_ms == pytest.approx(15.2) and ba.delay_ms == pytest.approx(15.2)  # equal
    # std² = (J_ab² + J_ba²) / 3 with equal configured jitters: J = std · sqrt(3/2)
    assert ab.jitter_ms == pytest.approx(2.5 * 1.5**0.5)
    assert ab.setup_ms == pytest.approx(16.0) and ab.overhead_ms == pytest.approx(0.8)
    assert ab.goodput_mbit == pytest.approx(94_000.0)
    assert ab.configured_rate_mbit == 100_000.0 and ab.transfers == transfers["a_to_b"]


def test_one_size_falls_back_to_the_goodput_and_nothing_is_refused() -> None:
    link = _net().links[0]
    one = {"a_to_b": _line(0.016, 1e8, [1_000_000] * 3)}
    ab, ba = fit_link(link, _probe(30.0, 0.0, 900.0), one, SCALE)
    assert ab.rate_source == ba.rate_source == "goodput" and ab.rate_mbit == 90_000.0
    assert ab.jitter_ms == 0.0 and ab.flow_rate_mbit is None
    # no goodput: the transfers' line is the line, and nothing caps a flow below it
    sizes = {d: _line(0.016, 1e8, [10**6, 10**7]) for d in ("a_to_b", "b_to_a")}
    ab, _ = fit_link(link, _probe(30.0, 0.0, None), sizes, SCALE)
    assert ab.rate_source == "transfers" and ab.rate_mbit == pytest.approx(80_000.0)
    assert ab.flow_rate_mbit is None  # it is the line


def test_a_connection_below_the_line_caps_each_flow() -> None:
    """One CUBIC connection carried 400 of a 950 Mbit/s line (scaled) one way, the line
    the other: the fit keeps the flow rate both ways, at scale 1, and the file caps flows
    only where the connection, not the line, was the bound."""
    link = _net().links[0]
    transfers = {
        "a_to_b": _line(0.010, 50e6, [10**6, 10**7]),  # 400 Mbit/s
        "b_to_a": _line(0.010, 118.75e6, [10**6, 10**7]),  # 950 Mbit/s
    }
    ab, ba = fit_link(link, _probe(30.0, 0.0, 950.0), transfers, SCALE)
    assert ab.rate_mbit == ba.rate_mbit == pytest.approx(95_000.0)
    assert ab.flow_rate_mbit == pytest.approx(40_000) and ba.flow_rate_mbit == pytest.approx(95_000)
    measured = Measured(at="t", host="h", kernel="k", scenario="pdd", scale=SCALE)
    model = LinkModelFile(measured=measured, directions=[ab, ba])
    assert model.flow_caps() == {("wan", "a_to_b"): pytest.approx(5e9)}


def test_transfer_sizes_are_the_traces_prompt_length_quantiles() -> None:
    assert transfer_sizes_tokens(list(range(1, 1001))) == [101, 501, 901]
    assert transfer_sizes_tokens([5, 5, 5]) == [5]
    assert transfer_sizes_tokens([]) == [1024, 8192, 32768]


def _model(tmp_path: Path) -> Path:
    link = _net().links[0]
    transfers = {"a_to_b": _line(0.02, 62.5e6, [10**6, 10**7])}  # 500 Mbit/s scaled
    fits = fit_link(link, _probe(40.0, 1.0, 600.0), transfers, SCALE)
    measured = Measured(at="2026-12-04T17:30:00+00:00", host="h", kernel="k", scenario="pdd",
                        scale=SCALE)  # fmt: skip
    path = tmp_path / "links.json"
    LinkModelFile(measured=measured, directions=fits).save(path)
    return path


def test_the_file_round_trips_and_folds_into_the_network(tmp_path: Path) -> None:
    source = load_link_model(_model(tmp_path))
    net = source.model.network(_net())
    ab, ba = net.links[0].shape("a_to_b"), net.links[0].shape("b_to_a")
    # the line that carries the fitted goodput: the link model takes the headers' share off
    assert ab.rate_mbit == ba.rate_mbit == pytest.approx(60_000.0 / PAYLOAD_SHARE)
    assert PathParams(ab.rate_mbit * 1e6 / 8, 0.0).bulk_rate == pytest.approx(60e9 / 8)
    # a_to_b's connection carries 500 of the line's 600 Mbit/s (scaled): each flow's cap
    assert source.model.flow_caps() == {("wan", "a_to_b"): pytest.approx(50e9 / 8)}
    assert ab.delay_ms == ba.delay_ms == pytest.approx(20.0)
    assert ab.loss_pct == 0.0 and net.schedule == _net().schedule
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(UserError, match="not a pddbench link model"):
        load_link_model(bad)


def test_a_virtual_run_uses_and_records_the_link_model(tmp_path: Path) -> None:
    source = load_link_model(_model(tmp_path))
    table = synthesise(load_profile("jan-feb"), SynthOptions(sessions=3)).table
    plan = ReplayPlan(plan_requests(table, Selection(speedup=10)), table, {}, "test")
    dep = load_scenario("pdd").deployment_config
    paths = new_run(tmp_path / "run", "twin")
    manifest = RunManifest.begin(argv=["test"], run_id=paths.run_id)
    net = source.model.network(_net())
    drive_virtual(plan, ReplayOptions(), dep, net, paths, manifest, calibration=source)
    saved = json.loads((paths.root / "manifest.json").read_text())
    links = saved["replay"]["link_model"]
    assert links["paths"]["p0->md0"]["delay_s"] == pytest.approx(0.020 + 2 * 5e-6)
    # the fitted rate is the payload the link carries; the line is that over its share
    assert links["paths"]["p0->md0"]["bulk_rate_bytes_per_s"] == pytest.approx(60e9 / 8)
    assert links["paths"]["p0->md0"]["rate_bytes_per_s"] == pytest.approx(60e9 / 8 / PAYLOAD_SHARE)
    calibration = links["calibration"]
    assert calibration["file"] == str(source.path)
    assert calibration["measured"]["at"] == "2026-12-04T17:30:00+00:00"
    assert [f["rate_source"] for f in calibration["fits"]] == ["goodput", "goodput"]
    assert [f["flow_rate_mbit"] for f in calibration["fits"]] == [pytest.approx(50_000.0), None]


def _pddbench(*args: str, drop: list[str] = ()) -> subprocess.CompletedProcess[str]:  # type: ignore[assignment]
    return subprocess.run(
        [*drop, sys.executable, "-m", "pddbench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_link_model_without_the_virtual_backend_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _model(tmp_path)
    args = ["replay", "--trace", str(tmp_path / "none.parquet"), "--scenario", "pdd"]
    proc = _pddbench(*args, "--link-model", str(path), "--out", str(tmp_path / "o"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "needs --backend virtual" in lines[0]


DROP = ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin"]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_calibrate_without_network_privileges_exits_2_with_one_line() -> None:
    # first make sure the privileges really are gone: never calibrate from a test
    check = "from pddbench.netem.nsutil import require_net_admin as r; r()"
    gone = subprocess.run([*DROP, sys.executable, "-c", check], capture_output=True, text=True)
    if gone.returncode == 0:
        pytest.skip("setpriv left CAP_NET_ADMIN and CAP_SYS_ADMIN in place")
    proc = _pddbench("twin", "calibrate", "--scenario", "pdd", drop=DROP)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "network emulation needs root" in lines[0]
