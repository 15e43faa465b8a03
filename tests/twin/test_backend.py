"""The twin as a run backend: a plan of the jan-feb profile in, a run folder out."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.folder import new_run
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.twin.backend import drive_virtual
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile


def test_virtual_run_folder_holds_every_request_and_says_virtual(tmp_path) -> None:
    table = synthesise(load_profile("jan-feb"), SynthOptions(days=0.01)).table
    planned = plan_requests(table, Selection(speedup=10))
    plan = ReplayPlan(planned, table, {}, "test")
    sc = load_scenario("pdd").model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    tables = []
    files = []
    for k in range(2):
        paths = new_run(tmp_path / str(k), "twin")
        manifest = RunManifest.begin(argv=["test"], run_id=paths.run_id)
        out = drive_virtual(plan, ReplayOptions(), dep, net, paths, manifest)
        assert out.records == len(planned) > 50 and out.errors == 0
        saved = json.loads((paths.root / "manifest.json").read_text())
        assert saved["replay"]["backend"] == "virtual"
        assert saved["replay"]["link_model"]["paths"]["p0->md0"]["delay_s"] > 0.015
        tables.append(pq.read_table(paths.requests))
        links = pq.read_table(paths.links).drop_columns(["run_id"]).to_pandas()  # NaN == NaN
        files.append((paths.server_metrics.read_bytes(), links))
    assert tables[0].num_rows == len(planned)
    assert tables[0].equals(tables[1])  # deterministic, file to file
    assert files[0][0] == files[1][0] and files[0][1].equals(files[1][1])  # and the others


def test_the_duration_cap_stops_sending_as_the_client_does(tmp_path) -> None:
    table = synthesise(load_profile("jan-feb"), SynthOptions(days=0.01)).table
    planned = plan_requests(table, Selection(speedup=10))
    plan = ReplayPlan(planned, table, {}, "test")
    dep = load_scenario("same-dc-pd").deployment_config
    starts = sorted(r.arrival_s for r in planned if r.parent_request_id is None)
    cap = starts[len(starts) // 2]  # half the sessions start after it
    paths = new_run(tmp_path, "twin")
    manifest = RunManifest.begin(argv=["test"], run_id=paths.run_id)
    out = drive_virtual(plan, ReplayOptions(max_duration_s=cap), dep, None, paths, manifest)
    sent = pq.read_table(paths.requests).column("intended_send_s").to_pylist()
    assert 0 < out.records < len(planned) and max(sent) < cap
    saved = json.loads((paths.root / "manifest.json").read_text())
    assert saved["planned_requests"] == len(planned) and saved["sent_requests"] == out.records
