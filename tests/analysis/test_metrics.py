"""Every metric against values computed by hand from a six-request run (ok, failed,
cancelled and skipped requests, multi-token chunks), plus empty and all-failed runs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pddbench.harness.analysis.breakdowns import breakdown, error_table
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Context, default_registry
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.config.cost import CostModel
from pddbench.harness.config.sla import DEFAULT_SLA, SLA
from tests.analysis.runs import rows_table, write_rows

NAN = float("nan")
SLA_HAND = SLA(ttft_s=1.0, tpot_s=0.3, e2e_s=2.0, target_pct=90)

ROWS = [
    # r1: direct, 11 tokens one per chunk, 95 % hit
    dict(
        request_id="r1",
        session_id="s1",
        turn_index=0,
        intended_send_s=0.0,
        actual_send_s=0.01,
        first_token_s=0.51,
        last_token_s=1.51,
        end_s=1.52,
        ttft_s=0.5,
        e2e_s=1.51,
        tpot_s=0.1,
        itl_mean_s=0.1,
        itl_p99_s=0.12,
        itl_max_s=0.15,
        input_tokens=1000,
        output_tokens=11,
        cached_tokens_theoretical=950,
        cached_tokens_reported=950,
        pipeline="P->MD",
        relay_tokens=0,
        wan_bytes=1000,
        token_times_s=[0.51 + 0.1 * i for i in range(11)],
    ),
    # r2: one output token (no TPOT), relayed, reported cache below theory, queued 20 ms
    dict(
        request_id="r2",
        session_id="s1",
        turn_index=1,
        intended_send_s=2.0,
        actual_send_s=2.05,
        client_queue_s=0.02,
        first_token_s=2.25,
        last_token_s=2.25,
        end_s=2.26,
        ttft_s=0.2,
        e2e_s=0.21,
        input_tokens=2000,
        output_tokens=1,
        cached_tokens_theoretical=1990,
        cached_tokens_reported=1900,
        pipeline="P->RLD->MD",
        relay_tokens=1,
        wan_bytes=500,
    ),
    # r3: slow TTFT, multi-token chunks (2 tokens in the first chunk, 2 in a later one),
    # hit rate only from the reported value
    dict(
        request_id="r3",
        session_id="s2",
        turn_index=0,
        intended_send_s=1.0,
        actual_send_s=1.0,
        first_token_s=3.0,
        last_token_s=4.0,
        end_s=4.0,
        ttft_s=2.0,
        e2e_s=3.0,
        tpot_s=0.25,
        itl_mean_s=0.25,
        itl_p99_s=0.49,
        itl_max_s=0.5,
        input_tokens=100,
        output_tokens=5,
        cached_tokens_reported=50,
        pipeline="P->RLD->MD",
        relay_tokens=3,
        wan_bytes=2000,
        token_times_s=[3.0, 3.0, 3.25, 3.5, 4.0],
    ),
    # r4: HTTP error, no tokens
    dict(
        request_id="r4",
        session_id="s2",
        turn_index=1,
        intended_send_s=5.0,
        actual_send_s=5.0,
        end_s=5.1,
        e2e_s=0.1,
        input_tokens=100,
        cached_tokens_theoretical=100,
        status="error",
        error_class="http",
    ),
    # r5: cancelled at the end of the run after 2 tokens
    dict(
        request_id="r5",
        session_id="s3",
        turn_index=0,
        intended_send_s=6.0,
        actual_send_s=6.0,
        first_token_s=6.5,
        last_token_s=6.6,
        end_s=8.0,
        ttft_s=0.5,
        input_tokens=10,
        output_tokens=2,
        status="cancelled",
        error_class="cancelled",
    ),
    # r6: never sent (its session failed)
    dict(
        request_id="r6",
        session_id="s3",
        turn_index=1,
        intended_send_s=8.0,
        input_tokens=10,
        status="skipped",
        error_class="dependency",
    ),
]


@pytest.fixture(scope="module")
def records() -> RecordSet:
    return RecordSet.from_arrow(rows_table(ROWS))


@pytest.fixture(scope="module")
def ms(records: RecordSet):  # type: ignore[no-untyped-def]
    cost = CostModel(unit_price={"A": 1.0}, gpus={"A": 4}, line_cost=0.0)
    return default_registry().compute(records, Context(sla=SLA_HAND, cost=cost))


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_latency_distributions(ms) -> None:  # type: ignore[no-untyped-def]
    ttft = ms["ttft"].dist
    assert ttft.count == 3  # r1, r2, r3: only ok requests
    assert close(ttft.mean, 0.9)
    assert close(ttft.get("p50"), 0.5)
    assert close(ttft.get("p90"), 1.7)  # sorted [.2, .5, 2.0]: index 1.8
    assert close(ttft.get("p99"), 1.97)
    assert close(ttft.get("p99.9"), 1.997)
    assert ms["tpot"].dist.count == 2  # r2 has one token: no TPOT
    assert close(ms.value("tpot.mean"), 0.175)
    assert close(ms.value("e2e.mean"), (1.51 + 0.21 + 3.0) / 3)
    assert close(ms.value("e2e.max"), 3.0)


def test_itl_three_views(ms) -> None:  # type: ignore[no-untyped-def]
    # token-level: r1's ten 0.1 s gaps + r3's [0, 0.25, 0.25, 0.5] (multi-token chunks)
    pooled = [0.1] * 10 + [0.0, 0.25, 0.25, 0.5]
    itl = ms["itl"].dist
    assert itl.count == 14
    assert close(itl.mean, np.mean(pooled))
    assert close(itl.get("p99"), float(np.percentile(pooled, 99)))
    # token-weighted mean without token times: (1.0 + 1.0) / (10 + 4)
    assert close(ms.value("itl_mean"), 2.0 / 14)
    assert close(ms.value("itl_mean"), itl.mean)
    # per-request P99: one value per request with an ITL summary
    assert ms["itl_req_p99"].dist.count == 2
    assert close(ms.value("itl_req_p99.mean"), (0.12 + 0.49) / 2)
    assert close(ms.value("itl_req_max.max"), 0.5)


def test_queueing_and_schedule_lag(ms) -> None:  # type: ignore[no-untyped-def]
    assert ms["schedule_lag"].dist.count == 5  # sent: r1..r5
    assert close(ms.value("schedule_lag.mean"), (0.01 + 0.03 + 0 + 0 + 0) / 5)
    assert close(ms.value("schedule_lag.max"), 0.03)  # 2.05 - 2.0 - 0.02
    assert close(ms.value("client_queue.mean"), 0.004)


def test_rates_over_the_run_window(ms) -> None:  # type: ignore[no-untyped-def]
    assert close(ms.value("duration"), 8.0)  # first intended 0.0 to last end 8.0
    assert ms.value("requests") == 6
    assert ms.value("ok_requests") == 3
    assert close(ms.value("completed_rps"), 3 / 8)
    assert close(ms.value("offered_rps"), 6 / 8)
    assert close(ms.value("output_tps"), (11 + 1 + 5) / 8)
    assert close(ms.value("input_tps"), 3100 / 8)


def test_sla_attainment_and_goodput(ms) -> None:  # type: ignore[no-untyped-def]
    # sent = 5; met every target: r1 and r2 (r2 has no TPOT: passes); r3 misses TTFT/E2E
    assert close(ms.value("sla_attainment"), 2 / 5)
    assert close(ms.value("sla_attainment_ttft"), 2 / 5)
    assert close(ms.value("sla_attainment_tpot"), 3 / 5)
    assert close(ms.value("sla_attainment_e2e"), 2 / 5)
    assert close(ms.value("goodput"), 2 / 8)
    assert close(ms.value("bcr"), (2 / 8) / 4)
    assert close(ms.value("error_rate"), 3 / 6)


def test_errors_by_class(records: RecordSet) -> None:
    rows = {(e.status, e.error_class): e.requests for e in error_table(records)}
    assert rows == {
        ("error", "http"): 1,
        ("cancelled", "cancelled"): 1,
        ("skipped", "dependency"): 1,
    }


def test_cache_and_hit_rates(ms, records: RecordSet) -> None:  # type: ignore[no-untyped-def]
    np.testing.assert_allclose(records.hit_rate, [0.95, 0.995, 0.5, 1.0, NAN, NAN])
    assert list(records.hit_bin) == [2, 6, 0, 6, -1, -1]  # 95 % exactly is in 95-96 %
    assert close(ms.value("token_hit_rate"), 3090 / 3200)
    assert close(ms.value("cache_fidelity"), 2850 / 2940)
    assert ms["cache_fidelity_req"].dist.count == 2
    assert close(ms.value("cache_fidelity_req.min"), 1900 / 1990)
    assert close(ms.value("cache_exact_share"), 0.5)


def test_pdd_metrics(ms) -> None:  # type: ignore[no-untyped-def]
    assert close(ms.value("rld_token_share"), 4 / 17)
    assert close(ms.value("relayed_share"), 2 / 3)
    assert close(ms.value("wan_bytes"), 3500)
    assert close(ms.value("wan_bandwidth"), 8 * 3500 / 8)
    assert close(ms.value("wan_bytes_req.mean"), 3500 / 3)
    assert ms["handoff_itl_max"].dist.count == 1  # r3 (r2 has no ITL)
    assert close(ms.value("handoff_spike"), 0.5 / 0.15)


def test_sessions(ms) -> None:  # type: ignore[no-untyped-def]
    assert ms.value("sessions") == 3
    assert ms["task_completion"].dist.count == 1  # only s1 completed every request
    assert close(ms.value("task_completion.mean"), 2.26)  # last end - first intended
    assert close(ms.value("session_sla_attainment"), 1 / 3)
    assert close(ms.value("session_goodput"), 1 / 8)


def test_breakdown_by_hit_bin_adds_up(records: RecordSet) -> None:
    ctx = Context(sla=SLA_HAND)
    bd = breakdown(records, "hit_bin", default_registry(), ctx)
    groups = {g.label: g for g in bd.groups}
    assert set(groups) == {"0-90%", "95-96%", "99-100%", "unknown"}
    assert groups["99-100%"].requests == 2
    assert close(groups["99-100%"].metrics.value("goodput"), 1 / 8)  # r2 over the run window
    total = sum(g.metrics.value("goodput") for g in bd.groups)
    assert close(total, 2 / 8)
    assert close(groups["0-90%"].metrics.value("ttft.p50"), 2.0)
    reg = default_registry()
    turns = {g.label: g.requests for g in breakdown(records, "turn", reg, ctx).groups}
    assert turns == {"0": 3, "1": 3}
    pipes = {
        g.label: g.requests for g in breakdown(records, "pipeline", default_registry(), ctx).groups
    }
    assert pipes == {"P->MD": 1, "P->RLD->MD": 2, "n/a": 3}


def test_parquet_round_trip_gives_the_same_metrics(tmp_path: Path, ms) -> None:  # type: ignore[no-untyped-def]
    run = load_run(write_rows(tmp_path / "run", ROWS))
    again = default_registry().compute(run.records, Context(sla=SLA_HAND))
    for key in ("ttft.p90", "itl.p99", "goodput", "task_completion.mean", "cache_fidelity"):
        assert close(again.value(key), ms.value(key)), key


def test_agent_type_breakdown_when_the_column_exists() -> None:
    agents = ["main", "sub"] * 3
    table = rows_table([dict(r, agent_type=a) for r, a in zip(ROWS, agents, strict=True)])
    records = RecordSet.from_arrow(table)
    bd = breakdown(records, "agent_type", default_registry(), Context())
    assert {g.label: g.requests for g in bd.groups} == {"main": 3, "sub": 3}


def test_empty_run_is_nan_not_a_crash() -> None:
    ms = default_registry().compute(RecordSet.empty(), Context())
    assert ms.value("requests") == 0
    assert ms.value("ok_requests") == 0
    assert ms.value("sessions") == 0
    assert ms["ttft"].dist.count == 0 and math.isnan(ms.value("ttft.p99"))
    for key in (
        "duration",
        "completed_rps",
        "goodput",
        "sla_attainment",
        "error_rate",
        "itl_mean",
        "rld_token_share",
        "wan_bandwidth",
        "bcr",
    ):
        assert math.isnan(ms.value(key)), key


def test_all_failed_run_has_zero_goodput_and_no_latency() -> None:
    rows = [dict(r, status="error", error_class="stream") for r in ROWS[:3]]
    ms = default_registry().compute(RecordSet.from_arrow(rows_table(rows)), Context())
    assert ms.value("ok_requests") == 0
    assert ms.value("completed_rps") == 0.0  # the window exists, nothing completed
    assert ms.value("goodput") == 0.0
    assert ms.value("sla_attainment") == 0.0
    assert ms.value("error_rate") == 1.0
    assert ms["ttft"].dist.count == 0
    assert math.isnan(ms.value("rld_token_share"))  # no ok request reports relay tokens


def test_empty_sla_and_cost_tables_mean_not_declared(tmp_path: Path) -> None:
    run = load_run(write_rows(tmp_path / "run", ROWS[:1], sla={}, cost={}))
    assert run.sla() is None and run.cost() is None
    run = load_run(write_rows(tmp_path / "r2", ROWS[:1], sla={"ttft_s": 4.0}))
    assert run.sla() == DEFAULT_SLA.model_copy(update={"ttft_s": 4.0})  # overrides the default
