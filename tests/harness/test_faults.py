"""Instance faults: a kill takes the instance's whole process tree and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pddbench.harness.deploy.faults import FaultRun, descendants, kill_tree
from pddbench.netem import nsutil
from tests.waiting import wait_until

# a parent that starts a child and both sleep: an engine with its engine core, in small
CODE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def test_kill_tree_kills_the_instance_and_its_children_only() -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    parent = subprocess.Popen([sys.executable, "-c", CODE])
    try:
        wait_until(lambda: len(descendants(parent.pid)) == 1, what="the child", timeout_s=10)
        (child,) = descendants(parent.pid)
        assert kill_tree(parent.pid) == 2
        parent.wait(timeout=10)
        wait_until(lambda: not nsutil.is_alive(child), what="the child gone", timeout_s=10)
        assert nsutil.is_alive(bystander.pid) and nsutil.is_alive(os.getpid())
    finally:
        for p in (bystander, parent):
            p.kill()
            p.wait()


def test_a_scheduled_kill_happens_at_its_time_and_is_recorded() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = FaultRun([(0.2, "m0"), (30.0, "p0")], {"m0": proc.pid, "p0": 1})
        t0 = time.monotonic()
        run.start(t0)
        proc.wait(timeout=10)
        (done,) = run.stop()  # the second kill never came: not recorded, and PID 1 lives
        assert done.instance == "m0" and done.pid == proc.pid and done.processes == 1
        assert done.t_mono is not None and done.t_mono - t0 >= 0.2
    finally:
        proc.kill()
        proc.wait()


PORTS_PER_DEPLOYMENT = 16  # colocated: a router and four instances, with room

SCENARIO = """
name = "fault-demo"
description = "two reference deployments as engines: the client uses one, the other dies"
front_door = "door"
[[engines]]
name = "door"
port = {door}
command = ["{{python}}", "-m", "pddbench", "serve", "--scenario", "colocated", "--port",
           "{{port}}", "--quiet"]
[[engines]]
name = "victim"
port = {victim}
command = ["{{python}}", "-m", "pddbench", "serve", "--scenario", "colocated", "--port",
           "{{port}}", "--quiet"]
[[faults]]
at_s = 0.2
kill = "victim"
"""


def test_a_replay_kills_the_instance_its_scenario_names_and_the_report_says_so(
    tmp_path,
) -> None:
    import json

    from tests.servers.helpers import free_port_block
    from tests.traces import chain_trace

    # `serve --port` shifts every port of a deployment (router, then its instances), so each
    # deployment gets its own block of free ports, below the ephemeral range where the kernel
    # hands out ports to clients (a bind(0) port could be taken again before the engine binds)
    base = free_port_block(2 * PORTS_PER_DEPLOYMENT)
    ports = [base, base + PORTS_PER_DEPLOYMENT]
    scenario = tmp_path / "fault-demo.toml"
    scenario.write_text(SCENARIO.format(door=ports[0], victim=ports[1]))
    trace = chain_trace(tmp_path / "t.parquet", sessions=4, turns=3, turn_gap_s=1.0)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "pddbench", "replay", "--trace", str(trace), "--scenario",
         str(scenario), "--no-emulation", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    (fault,) = manifest["deployment"]["faults"]
    assert fault["instance"] == "victim" and fault["processes"] >= 1 and fault["error"] is None
    assert fault["pid"] == manifest["deployment"]["pids"]["victim"]
    assert not nsutil.is_alive(fault["pid"])
    (html,) = out.glob("report-*.html")
    page = html.read_text()
    assert 'id="fault-banner"' in page and "kill victim at" in page
