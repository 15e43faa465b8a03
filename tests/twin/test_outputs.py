"""A virtual run folder has ``server_metrics.parquet`` and ``links.parquet`` like an emulated
one: read by the same readers, shown in the same report sections, consistent with the
records (the WAN's bytes are the records' WAN bytes; P was busy), and sampling them
changes no record."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pddbench.harness.analysis.capacity import scheduler_lost_s
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.summary import analyze_run
from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.report.model import build_report
from pddbench.harness.report.sections import build_sections
from pddbench.harness.rundir.folder import new_run
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.harness.rundir.records import journal_line
from pddbench.netem.topology_config import LinkChange, RateSwing, ScheduledChange, WanSchedule
from pddbench.twin.backend import drive_virtual
from pddbench.twin.outputs import TwinOutputs
from pddbench.twin.run import run_twin
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

from .plans import hashes_for, plan


def _plan() -> ReplayPlan:
    table = synthesise(load_profile("jan-feb"), SynthOptions(days=0.005)).table
    return ReplayPlan(plan_requests(table, Selection(speedup=10)), table, {}, "test")


def _virtual_run(tmp_path, name: str, schedule: WanSchedule | None = None):
    sc = load_scenario(name).model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    if schedule is not None:
        net = net.model_copy(update={"schedule": schedule})
    paths = new_run(tmp_path / name, "twin")
    manifest = RunManifest.begin(argv=["test"], run_id=paths.run_id)
    out = drive_virtual(_plan(), ReplayOptions(), dep, net, paths, manifest)
    assert out.errors == 0
    return paths


@pytest.mark.parametrize("name", ["cross-dc-pd", "pdd"])
def test_virtual_runs_write_server_metrics_and_links_consistent_with_the_records(
    tmp_path, name: str
) -> None:
    paths = _virtual_run(tmp_path, name)
    run = load_run(paths.root)  # the readers the emulated path uses
    assert run.server_metrics is not None and run.links is not None
    records = pq.read_table(paths.requests)
    wan = sum(b or 0 for b in records.column("wan_bytes").to_pylist())
    usage = run.links.filter(pc.equal(run.links.column("kind"), "usage"))
    carried = pc.sum(usage.column("bulk_bytes")).as_py()
    assert wan > 0 and carried == pytest.approx(wan, rel=0.01)
    sm = run.server_metrics
    busy = sm.filter(pc.equal(sm.column("metric"), "busy_seconds_total"))
    p_busy = busy.filter(pc.equal(busy.column("instance"), "p0")).column("value").to_pylist()
    assert p_busy[0] == 0 and p_busy[-1] > 0 and p_busy == sorted(p_busy)
    times = sorted(set(sm.column("t_s").to_pylist()))
    end = max(records.column("end_s").to_pylist())
    assert times[0] == 0 and end <= times[-1] < end + 1.0  # the scraper's first and last
    assert scheduler_lost_s(sm) == 0

    analysis = analyze_run(run)
    assert analysis.server is not None and analysis.server.prompt_tokens_computed > 0
    hit = analysis.server.prefix_hit_rate
    assert 0 <= hit <= 1
    (probe,) = analysis.links
    assert probe["backend_a_to_b"] == "virtual" and probe["rtt_samples"] == 200
    assert probe["rtt_p50_ms"] == pytest.approx(probe["expected_rtt_p50_ms"], abs=1.0)
    report = build_report([paths.root])
    sections = {s.id: s for s in build_sections(report)}
    assert not sections["server"].missing and sections["server"].tables
    assert not sections["links"].missing and sections["links"].tables


def test_a_scheduled_swing_shows_as_change_rows_and_in_the_timeline(tmp_path) -> None:
    swing = RateSwing(link="wan", start_s=2.0, duration_s=3.0, fraction=0.1)
    paths = _virtual_run(tmp_path, "pdd", WanSchedule(swings=[swing]))
    run = load_run(paths.root)
    analysis = analyze_run(run)
    changes = [(r["t_s"], r["direction"], r["rate_mbit"]) for r in analysis.link_changes]
    assert (2.0, "a_to_b", 10_000.0) in changes and (5.0, "b_to_a", 100_000.0) in changes
    assert len(changes) == 6  # each direction's state at 0, the drop, the return
    assert run.manifest.clock.kind == "virtual"


def test_sampling_the_twin_changes_no_record() -> None:
    sc = load_scenario("pdd").model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    plain = [journal_line(r) for r in run_twin(dep, net, plan(), hashes_for(dep.block_size))]
    outputs = TwinOutputs()
    seen = run_twin(dep, net, plan(), hashes_for(dep.block_size), observe=outputs.attach)
    assert [journal_line(r) for r in seen] == plain
    assert outputs.scrapes > 1 and outputs.rows


def test_a_link_down_for_good_ends_the_run_with_timeouts_not_a_hang() -> None:
    down = ScheduledChange(at_s=0.0, link="wan", changes=LinkChange(up=False))
    sc = load_scenario("cross-dc-pd").model_copy(update={"emulation_scale": 1.0})
    dep = sc.deployment_config
    net = sc.network_config().model_copy(update={"schedule": WanSchedule(events=[down])})
    outputs = TwinOutputs()
    records = run_twin(dep, net, plan(2, 1), hashes_for(dep.block_size), observe=outputs.attach)
    assert len(records) == 2 and all(r.status != "ok" for r in records)
    assert all("timed out" in (r.error_message or "") for r in records)
    assert max(r.t_s for r in outputs.rows) < 1000
