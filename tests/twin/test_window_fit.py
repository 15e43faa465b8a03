"""What the deployment's own KV connections carried, fitted from an emulated run's records
(``pddbench twin fit-windows``): only large WAN transfers count, each at its modelled bytes
over the sender's active time, in the direction it crossed; the median per direction."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.twin.backend import twin_config
from pddbench.twin.window_fit import fit_flow_rates, flow_samples


def timing(to: str, modelled: float, active: list[list[float]], *, path: str = "wan",
           source: str | None = None) -> str:  # fmt: skip
    role = "MD" if to.startswith("md") else "RLD"
    landed = {role: {"source": source}} if source else {}
    return json.dumps(
        {
            "instances": {"P": "p0", role: to},
            "kv_transfers": [
                {"to": to, "path": path, "modelled_bytes": modelled, "active": active}
            ],
            "kv_landed": landed,
        }
    )


def test_large_wan_transfers_give_each_direction_its_median_connection_rate() -> None:
    dep, net = twin_config(load_scenario("pdd"))
    assert net is not None
    records = [
        timing("md0", 1e9, [[0.0, 0.5], [1.0, 1.5]]),  # 1 GB in 1 s active: 8,000 Mbit/s
        timing("md1", 2e9, [[3.0, 4.0]]),  # 16,000 Mbit/s
        timing("md0", 5e8, [[5.0, 6.0]]),  # 4,000 Mbit/s
        timing("md0", 5e7, [[7.0, 7.001]]),  # too small to measure a window: ignored
        timing("rld0", 1e9, [[8.0, 8.1]], path="intra"),  # inside dc-a: not the WAN
        timing("md0", 1e9, []),  # no active time: nothing to measure
        math.nan,  # a failed request's record: no server timing
        None,
    ]
    samples = flow_samples(records, dep, net)
    assert [(s.link, s.direction, round(s.mbit)) for s in samples] == [
        ("wan", "a_to_b", 8000),
        ("wan", "a_to_b", 16000),
        ("wan", "a_to_b", 4000),
    ]
    assert fit_flow_rates(samples) == {("wan", "a_to_b"): (pytest.approx(8000.0), 3)}
    # a relay's handoff from rld0 (dc-a) to md0 (dc-b) is the same direction
    relay = flow_samples([timing("md0", 1e9, [[0.0, 2.0]], source="rld0")], dep, net)
    assert [(s.direction, round(s.mbit)) for s in relay] == [("a_to_b", 4000)]
    # an even count: the mean of the middle two
    assert fit_flow_rates(samples[:2])[("wan", "a_to_b")] == (pytest.approx(12000.0), 2)


def test_the_command_refuses_a_virtual_run_in_one_line(tmp_path: Path) -> None:
    """A virtual run's transfers are the model's own: nothing to fit from them."""
    from pddbench.harness.config.replay import ReplayOptions, Selection
    from pddbench.harness.drive.replay import ReplayPlan
    from pddbench.harness.plan.sessions import plan_requests
    from pddbench.harness.rundir.folder import new_run
    from pddbench.harness.rundir.manifest import RunManifest
    from pddbench.twin.backend import drive_virtual
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile

    table = synthesise(load_profile("jan-feb"), SynthOptions(sessions=2)).table
    plan = ReplayPlan(plan_requests(table, Selection(speedup=10)), table, {}, "test")
    dep, net = twin_config(load_scenario("pdd"))
    paths = new_run(tmp_path / "run", "twin")
    manifest = RunManifest.begin(argv=["test"], run_id=paths.run_id)
    drive_virtual(plan, ReplayOptions(), dep, net, paths, manifest)
    out = subprocess.run(
        [sys.executable, "-m", "pddbench", "twin", "fit-windows", str(paths.root),
         "--link-model", str(tmp_path / "lm.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"pddbench: {paths.root} is a virtual run: fit on an emulated one"
    ]
