"""The sizing search: candidates within the budget, the model's bounds, the shortlist, and
``pddbench size`` on the twin (a jan-feb-profile trace)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.sizing import bounds, rank, space
from pddbench.servers.config import Role

W = bounds.Workload(context=64990, uncached=7100, output=253)
D = bounds.Decoding(tpot_s=0.030, draft_tokens=2, acceptance=0.85)


def test_workload_means_count_unknown_hits_as_misses() -> None:
    w = bounds.Workload.of(np.array([100, 300]), np.array([0.5, np.nan]), np.array([10, 30]))
    assert (w.context, w.uncached, w.output) == (200, 175, 20)


def test_more_chips_never_bound_lower() -> None:
    for kind, role in (("prefill", Role.PREFILL), ("decode", Role.DECODE)):
        rates = [
            bounds.role_bounds(
                "pdd-flagship-1t",
                [bounds.Group(role, "h800-sxm", "dc-a", 1, chips)],
                W,
                D,
                {},
            )[0].req_per_s
            for chips in (16, 24, 32)
        ]
        assert rates == sorted(rates), kind
        assert rates[0] > 0


@pytest.mark.parametrize("name", ["same-dc-pd", "pdd", "cross-dc-pd"])
def test_candidates_lie_within_the_budget_and_hold_the_weights(name: str) -> None:
    scenario = load_scenario(name)
    roles, line = space.template(scenario)
    cands = list(space.enumerate_candidates(roles, line, 88.0))
    assert cands
    for c in cands[:: max(1, len(cands) // 200)]:
        assert 0.9 * 88 <= c.cost <= 88 + 1e-9
        for r, (n, chips) in zip(c.roles, c.shape, strict=True):
            assert n >= 1 and chips >= r.min_chips
            assert bounds.holds_weights(r.hardware, chips, "pdd-flagship-1t")
    assert not bounds.holds_weights("h800-sxm", roles[0].min_chips - 1, "pdd-flagship-1t")


def test_a_candidate_applied_is_a_scenario_of_its_shape_and_cost() -> None:
    scenario = load_scenario("pdd")
    roles, line = space.template(scenario)
    cand = space.Candidate(tuple(roles), ((2, 20), (1, 15), (1, 30)), line)
    sized = space.apply(scenario, cand)
    ids = [i.id for i in sized.deployment_config.instances]
    assert ids == ["router", "p0", "p1", "rld0", "md0"]
    assert sized.cost_model is not None
    assert sized.cost_model.total == pytest.approx(cand.cost) == pytest.approx(40 + 15 + 37.5 + 0.3)
    md = sized.deployment_config.instances[-1]
    assert (md.hardware, md.datacenter, md.attention_dtype, md.chips) == ("h20", "dc-b", "fp8", 30)
    own = space.own_candidate(scenario)
    assert own.cost == pytest.approx(scenario.cost_model.total)  # type: ignore[union-attr]


def test_the_shortlist_is_one_per_structure_best_bound_per_cost_first() -> None:
    scenario = load_scenario("same-dc-pd")
    roles, line = space.template(scenario)
    ranked, own, priced = rank.shortlist(
        scenario, space.enumerate_candidates(roles, line, 88.0), W, D, 4
    )
    assert priced > 100 and len(ranked) == 4
    assert len({r.candidate.structure for r in ranked}) == 4
    scores = [r.bound_per_cost for r in ranked]
    assert scores == sorted(scores, reverse=True)
    assert ranked[0].bound_per_cost >= own.bound_per_cost
    assert own.text() == "P 2x22 h800-sxm + D 2x22 h800-sxm"
    naive = load_scenario("cross-dc-pd")  # the built-in runs as written: 22 + 21 chips of P
    assert space.describe(naive) == "P 22+21 h800-sxm + D 2x16 h20"


def test_whole_context_crosses_the_wan_without_a_decode_side_cache() -> None:
    naive = rank.rank(
        load_scenario("cross-dc-pd"),
        space.own_candidate(load_scenario("cross-dc-pd")),
        W,
        D,
        rank.wan_rates(load_scenario("cross-dc-pd")),
    )
    pdd = load_scenario("pdd")
    drc = rank.rank(pdd, space.own_candidate(pdd), W, D, rank.wan_rates(pdd))
    wan = {r.role: r for r in naive.bounds}["wan"]
    assert naive.binding.resource == bounds.WAN
    assert wan.req_per_s == pytest.approx(100e9 / 8 / (W.context * 46490), rel=0.05)
    assert {r.role: r for r in drc.bounds}["wan"].req_per_s == pytest.approx(
        wan.req_per_s * W.context / W.uncached, rel=1e-6
    )


def test_size_prints_its_table_and_chooses_on_the_twin(tmp_path: Path) -> None:
    """``pddbench size`` on a jan-feb-profile trace: the built-in and the shortlist
    measured on the twin at two deployment seeds, the table printed with the chosen row and
    the seeds' range, sizing.json written."""
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile
    from pddbench.workloads.traceio import write_trace

    table = synthesise(load_profile("jan-feb"), SynthOptions(sessions=600, days=0.5)).table
    trace = write_trace(table, tmp_path / "jan-feb-profile.parquet")
    out = tmp_path / "o"
    args = ["size", "--trace", str(trace), "--scenario", "same-dc-pd", "--top", "1", "--quick",
            "--seeds", "2"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pddbench", *args, "--out", str(out)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "sizing-same-dc-pd" / "sizing.json").read_text())
    sources = [r["source"] for r in result["rows"]]
    assert sources == ["sized", "built-in"]
    assert "Sizing of same-dc-pd at 88 A-eq. (VIRTUAL TIME)" in proc.stdout
    assert "(built-in)" in proc.stdout
    assert "over 2 seeds min-max" in proc.stdout
    for k, r in enumerate(result["rows"]):
        assert r["basis"] in ("capacity", "load-bounded", "refused")
        assert r["binding"] != "unknown"
        assert len(r["seed_capacities"]) == 2
        for seed in (0, 1):
            assert list(
                (out / "sizing-same-dc-pd" / str(k) / f"seed{seed}").glob("*/manifest.json")
            )
    if result["chosen"] is not None:
        assert "CHOSEN" in proc.stdout
        assert f"same-dc-pd: chosen {result['rows'][result['chosen']]['deployment']}" in proc.stdout


def test_the_median_walk_ranks_walks_without_a_capacity_lowest() -> None:
    from pddbench.harness.sizing.search import median_walk

    assert median_walk([8.9, 7.0, 9.4, 8.6, 8.9]) in (0, 4)  # 8.9: the middle of five
    assert median_walk([5.0]) == 0
    assert median_walk([6.0, None, 5.0]) == 2  # None, 5.0, 6.0
    assert median_walk([6.0, 5.0]) == 1  # the lower middle of two


def test_a_seeded_row_shows_its_range_and_the_table_its_column() -> None:
    from pddbench.harness.sizing.result import SizedRow, SizingResult

    base = dict(deployment="P 1x27", source="sized", cost=80.0, bound_rps=10.0,
                bound_resource="prefill", basis="capacity", capacity=8.6)  # fmt: skip
    one = SizedRow(**base)  # type: ignore[arg-type]
    seeded = SizedRow(**base, seed_capacities=[8.9, 7.03, 9.41, 8.6, None])  # type: ignore[arg-type]
    assert one.seeds_text() == "-"
    assert seeded.seeds_text() == "7.03-9.41 (1 of 5 none)"
    flat = SizingResult(system="s", budget=88, workload="w", priced=1, rows=[one], chosen=0)
    assert flat.seeds == 1 and not any("seeds" in h for h in flat.table().headers)
    both = SizingResult(system="s", budget=88, workload="w", priced=2, rows=[seeded, one],
                        chosen=0)  # fmt: skip
    table = both.table()
    assert both.seeds == 5 and "over 5 seeds min-max" in table.headers
    assert [c.text for c in table.rows[0]][4] == "7.03-9.41 (1 of 5 none)"
    assert "median seed" in table.note
    back = SizingResult.model_validate_json(both.model_dump_json())
    assert back.rows[0].seed_capacities == [8.9, 7.03, 9.41, 8.6, None]
