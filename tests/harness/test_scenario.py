"""Scenarios: validation with one-line errors, built-ins, and the engine command path."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pddbench.errors import UserError
from pddbench.harness.config.scenario import builtin_scenarios, load_scenario, parse_scenario
from tests.harness.test_replay_cli import ROOT
from tests.traces import chain_trace

PDDBENCH = [sys.executable, "-m", "pddbench"]


def test_builtins_load_and_derive_sites() -> None:
    names = builtin_scenarios()
    assert {"same-dc-pd", "cross-dc-pd", "pdd"} <= set(names)
    pdd = load_scenario("pdd").resolved("nfqueue")
    net = pdd.network_config()
    assert {s.name for s in net.sites} == {"dc-a", "dc-b"}
    assert [c.site for c in net.effective_clients()] == ["dc-a"]  # next to the router
    assert pdd.front_door_name == "router" and pdd.integrity_seed == 0
    # 100 Gbit/s over a backend that sustains 1 Gbit/s
    assert net.scale == pdd.emulation_scale == 100.0
    assert pdd.scale_source.startswith("auto: 1/100")
    with pytest.raises(ValueError, match="not resolved"):
        load_scenario("pdd").network_config()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('name = "x"\n', "give either a [deployment]"),
        (
            'name = "x"\nfront_door = "nope"\n[[engines]]\nname = "e"\ncommand = ["a"]\n',
            "front_door 'nope'",
        ),
        ('name = "x"\n[[engines]]\nname = "e"\ncommand = ["a"]\nport = 0\n', "engines[0].port"),
        (
            'name = "x"\n[[engines]]\nname = "e"\ncommand = ["a"]\n[network]\nscale = -1\n',
            "network",
        ),
        ('name = "x"\nbogus = 1\n[[engines]]\nname = "e"\ncommand = ["a"]\n', "bogus"),
        ("name = \n", "not valid TOML"),
    ],
)
def test_invalid_scenarios_give_one_line(text: str, fragment: str) -> None:
    with pytest.raises(UserError) as err:
        parse_scenario(text, "s.toml")
    assert fragment in str(err.value) and "\n" not in str(err.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _engine_scenario(path: Path, command: list[str], port: int) -> Path:
    path.write_text(
        'name = "sse-engine"\nstartup_timeout_s = 20\n'
        "[[engines]]\n"
        f'name = "e0"\nport = {port}\nstartup_timeout_s = 20\n'
        f"command = {json.dumps(command)}\n"
    )
    return path


def test_engine_command_path_replays_on_loopback(tmp_path) -> None:
    port = _free_port()
    scen = _engine_scenario(
        tmp_path / "s.toml",
        ["{python}", "-m", "tests.harness.sse_server", "2", "0", "{host}", "{port}"],
        port,
    )
    trace = chain_trace(tmp_path / "t.parquet", sessions=4, turns=2)
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--scenario",
            str(scen),
            "--no-emulation",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    (run,) = [p for p in (tmp_path / "o").iterdir() if p.is_dir()]
    df = pq.read_table(run / "requests.parquet").to_pandas()
    assert len(df) == 8 and (df.status == "ok").all()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["deployment"]["mode"] == "loopback"
    assert manifest["scenario"]["engines"][0]["port"] == port


def test_engine_that_dies_is_named_with_its_log(tmp_path) -> None:
    scen = _engine_scenario(
        tmp_path / "s.toml",
        ["{python}", "-c", "import sys; print('cannot load model weights'); sys.exit(3)"],
        _free_port(),
    )
    trace = chain_trace(tmp_path / "t.parquet", sessions=1, turns=1)
    res = subprocess.run(
        [
            *PDDBENCH,
            "replay",
            "--trace",
            str(trace),
            "--scenario",
            str(scen),
            "--no-emulation",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert "instance e0 exited with status 3" in res.stderr
    assert "cannot load model weights" in res.stderr
    assert "Traceback" not in res.stderr
    (run,) = [p for p in (tmp_path / "o").iterdir() if p.is_dir()]
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"


# -- cost derived from the deployment (equal-cost comparison, PDD.md E10) -------------------
def _show_cost(name: str) -> dict:
    res = subprocess.run(
        [*PDDBENCH, "scenario", "show", name, "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(res.stdout)["cost"]


def test_builtin_costs_follow_the_published_equal_cost_comparison() -> None:
    same, cross, drc, pdd = (
        _show_cost(n) for n in ("same-dc-pd", "cross-dc-pd", "cross-dc-pd-drc", "pdd")
    )
    assert same["total"] == pytest.approx(88.0) and same["gpus"] == {"h800-sxm": 88}
    assert pdd["gpus"] == {"h800-sxm": 43, "h20": 32} and pdd["line_cost"] > 0
    assert -0.08 <= pdd["total"] / same["total"] - 1 <= -0.03
    for baseline in (cross, drc):
        assert abs(baseline["total"] / pdd["total"] - 1) <= 0.02
    for cost in (same, cross, drc, pdd):  # the breakdown adds up to the total
        assert sum(i["cost"] for i in cost["breakdown"]) == pytest.approx(cost["total"])
    # every instance is costed, and at the chips it runs on
    scen = load_scenario("pdd")
    chips = {i.id: i.chips for i in scen.deployment_config.instances if i.role.value != "router"}
    costed = {n: i["chips"] for i in pdd["breakdown"] for n in i["instances"]}
    assert costed == chips


def test_builtins_decode_speculatively_alike_and_typos_are_refused() -> None:
    """Every reference-server built-in speculates the same way (a deployment setting, never a
    system's advantage); a misspelt key in [deployment.speculative] is one line."""
    settings = set()
    for name in builtin_scenarios():
        scen = load_scenario(name)
        if scen.deployment is not None:
            sp = scen.deployment_config.speculative
            settings.add((sp.draft_tokens, sp.acceptance))
    assert settings == {(2, 0.85)}
    text = (ROOT / "pddbench" / "scenarios" / "pdd.toml").read_text()
    bad = text.replace("acceptance = 0.85", "acceptence = 0.85")
    with pytest.raises(UserError) as err:
        parse_scenario(bad, "s.toml")
    assert "deployment.speculative.acceptence: unknown key" in str(err.value)
    with pytest.raises(UserError, match="draft_tokens"):
        parse_scenario(text.replace("draft_tokens = 2", "draft_tokens = 0"), "s.toml")


def test_cost_counts_that_disagree_with_the_instances_exit_2(tmp_path) -> None:
    text = (ROOT / "pddbench/scenarios/pdd.toml").read_text()
    stale = tmp_path / "stale.toml"
    stale.write_text(
        text.replace("line_cost = 0.3", 'line_cost = 0.3\ngpus = { "h800-sxm" = 48, h20 = 32 }')
    )
    for argv in (["scenario", "show", str(stale), "--json"], ["scenario", "validate", str(stale)]):
        res = subprocess.run([*PDDBENCH, *argv], capture_output=True, text=True, cwd=ROOT)
        assert res.returncode == 2, res
        assert res.stdout == "" and "Traceback" not in res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "cost.gpus" in lines[0] and "h800-sxm = 43" in lines[0]
    agreeing = tmp_path / "agree.toml"
    agreeing.write_text(
        text.replace("line_cost = 0.3", 'line_cost = 0.3\ngpus = { "h800-sxm" = 43, h20 = 32 }')
    )
    assert load_scenario(str(agreeing)).cost_model.total == pytest.approx(83.3)


def test_manifest_cost_reads_back_as_a_scenario() -> None:
    """A run's manifest records the derived cost; resume re-validates it as a scenario."""
    from pddbench.harness.config.scenario import Scenario

    scen = load_scenario("cross-dc-pd")
    again = Scenario.model_validate(scen.manifest())
    assert again.cost_model == scen.cost_model


def test_a_copy_with_another_deployment_builds_its_own_deployment_config() -> None:
    """deployment_config is cached: a copy with another deployment (a seed, the instances)
    must not carry the original's (the twin would replay the old seed)."""
    scen = load_scenario("pdd")
    assert scen.deployment_config.seed == 0  # cached on the original
    assert scen.deployment is not None
    dep = scen.deployment.model_copy(update={"seed": 3})
    copy = scen.model_copy(update={"deployment": dep})
    assert copy.deployment_config.seed == 3
    assert scen.with_seed(5).deployment_config.seed == 5
    assert scen.deployment_config.seed == 0
    renamed = scen.model_copy(update={"name": "pdd-b"})
    assert renamed.deployment_config.name == "pdd-b"
    scaled = scen.model_copy(update={"emulation_scale": 50.0})
    assert scaled.deployment_config is scen.deployment_config  # nothing it depends on changed
