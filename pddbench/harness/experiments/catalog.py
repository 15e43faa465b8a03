"""The twelve declared experiments of PDD.md's table, and the registry that holds them.

Owns the declarations only: each :class:`Experiment` names its workload, scenarios, sweep,
metrics, PDD.md's own wording (``expected`` is the table's cell verbatim, ``published``
the figures from "Published results" / "Handoff" / "The workload"), its shape check and
its declared cost. Adding an experiment is adding one declaration to :data:`EXPERIMENTS`.
The runners live in ``run_*`` modules; the checks' vocabulary in ``checks``.

Bands are read from PDD.md's words ("≈", "a few %", "about"): "≈ x" is taken as x/2 .. 2x
unless the text gives a range. No band was chosen by looking at a measured value.
"""

from __future__ import annotations

import math

from pddbench.errors import UserError
from pddbench.harness.experiments import checks as c
from pddbench.harness.experiments.model import CheckResult, Cost, Experiment, Measurement
from pddbench.harness.experiments.run_model import run_e2, run_e7_model
from pddbench.harness.experiments.run_replay import (
    run_e4,
    run_e5,
    run_e6,
    run_e8,
    run_e9,
    run_e11,
)
from pddbench.harness.experiments.run_trace import run_e1, run_e3


def _e1(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band(">=95% hit share", m.get("share_ge_95"), 0.70, 0.80),
        c.in_band("<50% hit share", m.get("share_lt_50"), 0.005, 0.10),
        c.in_band("mean hit", m.get("mean_hit"), 0.85, 0.95),
    )


def _e2(m: Measurement) -> CheckResult:
    u = m.line("uncached tokens/s")
    rev = m.line("revenue, cached at 10%")
    return c.all_of(
        c.dips_near(u.x, u.y, (0.20, 0.40, 0.70), 0.03, need=2),
        c.bathtub(rev.x, rev.y),
    )


def _e3(m: Measurement) -> CheckResult:
    return c.in_band("WAN need without / with DRC", m.get("reduction"), 5.0, 20.0, "x")


def _e4(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band("P50 gap cross - same", m.get("p50_gap"), 1.25, 5.0, "s"),
        c.direction(
            "cross P99", m.get("cross_p99"), "3 x cross P50", 3 * m.get("cross_p50"), less=False
        ),
    )


def _e5(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band("PDD/naive TTFT P50 - 1", m.get("p50_change"), -0.75, -0.25),
        c.direction("PDD P99", m.get("pdd_p99"), "naive P99 / 2", m.get("cross_p99") / 2),
    )


def _e6(m: Measurement) -> CheckResult:
    return c.in_band("RLD share of output tokens", m.get("rld_share"), 0.03, 0.12)


def _e7(m: Measurement) -> CheckResult:
    parts = [
        c.in_band("KV handoff bytes", m.get("kv_bytes") / 1e6, 2.3, 9.3, "MB"),
        c.in_band("Extend-Decode bytes", m.get("ed_bytes") / 1e3, 0.75, 3.0, "KB"),
        c.direction(
            "Extend-Decode mean", m.get("ed_mean_ms"), "KV mean", m.get("kv_mean_ms"), less=False
        ),
    ]
    if m.wan_emulated:  # the KV peak comes from WAN jitter and queueing: only measured there
        parts.append(
            c.direction("Extend-Decode std", m.get("ed_std_ms"), "KV std", m.get("kv_std_ms"))
        )
    return c.all_of(*parts)


def _e8(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction(
            "one-shot RLD tokens",
            m.get("one_shot_rld_tokens"),
            "catch-up RLD tokens",
            m.get("catch_up_rld_tokens"),
        ),
        c.direction(
            "one-shot handoff ITL max",
            m.get("one_shot_handoff_itl_max"),
            "catch-up handoff ITL max",
            m.get("catch_up_handoff_itl_max"),
            less=False,
        ),
    )


def _e9(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction(
            "rld-only relayed share, 2nd half",
            m.get("rld_only_relayed_second"),
            "1st half",
            m.get("rld_only_relayed_first"),
            less=False,
        ),
        c.direction(
            "rld-only MD hit, 2nd half",
            m.get("rld_only_md_hit_second"),
            "pdd MD hit, 2nd half",
            m.get("pdd_md_hit_second"),
        ),
    )


def _e11(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction("DRC on TTFT P50", m.get("on_p50"), "off", m.get("off_p50")),
        c.direction(
            "DRC on WAN bytes", m.get("on_wan_bytes"), "off / 3", m.get("off_wan_bytes") / 3
        ),
    )


def _never(m: Measurement) -> CheckResult:
    return CheckResult(False, "not measured", "no runner")


REPLAY = "smoke profile (synthesised), first {60 quick | 400 full} requests, speedup 4"
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="E1",
        title="hit-rate distribution of the trace, per bin, over time",
        expected="skewed: 70–80% > 95% hit, a few % low-hit, mean ≈ 90%",
        published="~70–80% of requests hit > 95%, while a small tail (~3–4%) hits little; "
        "mean ≈ 90% (Jan–Feb 2026 agentic traffic, seven hit-rate bins over time)",
        workload="--trace, else the jan-feb profile (quick: first 100K requests)",
        scenarios=(),
        sweep="week of arrival",
        metrics=("share_ge_95", "share_lt_50", "mean_hit"),
        check=_e1,
        check_text=">=95% share in 70–80%, <50% share 0.5–10%, mean hit 85–95%",
        cost=Cost(quick_s=10, full_s=60),
        run=run_e1,
        figure="share per hit bin per week",
        notes=(
            "the built-in jan-feb profile was calibrated to this figure: on it E1 checks "
            "the generator and the hit model, not PDD; pass --trace for your own",
        ),
    ),
    Experiment(
        id="E2",
        title="benefit/throughput versus hit rate",
        expected="bathtub, with dips near 20/40/70%",
        published="bathtub-shaped: high at both ends, low in the middle (around 70%); sharp dips "
        "near 20%, 40% and 70% from tiny tail chunks of chunked prefill; cached input billed at "
        "10–25% of the uncached price",
        workload="controlled-hit batches of 64K-token prompts (compute model)",
        scenarios=(),
        sweep="prefix hit 0–98% in 1% steps",
        metrics=("uncached tokens/s", "revenue"),
        check=_e2,
        check_text="dips within ±3 points of >= 2 of 20/40/70% and no more than 3 elsewhere; "
        "revenue (cached at "
        "10%) higher at both ends than in 30–85%",
        cost=Cost(quick_s=15, full_s=60),
        run=run_e2,
        notes=(
            "in the compute model a dip falls where the uncached part of the prompt is just "
            "over a multiple of the chunk: hit ≈ 1 − k · chunk / prompt (k/8 for 64K prompts "
            "and 8192-token chunks), so its positions move with prompt length and chunk size",
        ),
        figure="uncached tokens/s and revenue",
    ),
    Experiment(
        id="E3",
        title="WAN bandwidth needed versus hit rate and KV size",
        expected="≈ 10x less at 90% mean hit",
        published="if the decode side keeps its own prefix cache, only the uncached suffix "
        "crosses the WAN: up to 10x less traffic; 10–80 KB of KV per token (46.5 KB in the "
        "micro-benchmark)",
        workload="--trace, else the jan-feb profile",
        scenarios=(),
        sweep="hit rate 0–99%, KV 10 / 46.5 / 80 KB per token",
        metrics=("reduction", "gbps_full_kv", "gbps_suffix"),
        check=_e3,
        check_text="full-KV / suffix-only WAN bytes in 5–20x",
        cost=Cost(quick_s=10, full_s=60),
        run=run_e3,
        figure="mean WAN need vs hit rate",
    ),
    Experiment(
        id="E4",
        title="TTFT CDF: same-DC PD vs naive cross-DC PD",
        expected="≈ +2.5 s at P50, a long tail (P99 ≈ 30 s) from low-hit requests",
        published="naive cross-DC PD measured P50 TTFT ≈ 4.2 s (≈ 2.5 s more than same-DC), "
        "a tail of ≈ 6.7 s (most likely P90) and P99 ≈ 29.7 s",
        workload=REPLAY,
        scenarios=("same-dc-pd", "cross-dc-pd"),
        sweep="",
        metrics=("ttft.p50", "ttft.p99"),
        check=_e4,
        check_text="P50 gap 1.25–5 s and cross-DC P99 > 3 x its P50",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e4,
        needs_wan=True,
        figure="TTFT CDF",
    ),
    Experiment(
        id="E5",
        title="TTFT: PDD vs naive cross-DC PD",
        expected="about −51.5%; the tail collapses",
        published="TTFT −51.5% versus naive cross-DC PD (the statistic is not stated)",
        workload=REPLAY,
        scenarios=("cross-dc-pd", "pdd"),
        sweep="",
        metrics=("ttft.p50", "ttft.p99"),
        check=_e5,
        check_text="PDD P50 change in −75…−25% and PDD P99 < half of naive's",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e5,
        needs_wan=True,
        figure="TTFT CDF",
    ),
    Experiment(
        id="E6",
        title="RLD share of output tokens",
        expected="≈ 6%",
        published="RLD generates only 6.2% of all output tokens (MD : RLD load ≈ 15 : 1)",
        workload=REPLAY,
        scenarios=("pdd",),
        sweep="",
        metrics=("rld_token_share",),
        check=_e6,
        check_text="RLD token share in 3–12%",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e6,
        needs_wan=True,
        notes=(
            "the router relays a request when its predicted WAN transfer breaks the TTFT "
            "target: on loopback (no emulated WAN) almost nothing is relayed",
        ),
    ),
    Experiment(
        id="E7",
        title="100-token handoff: KV transfer vs Extend-Decode",
        expected="4.6 MB/185 ms mean/512 ms peak vs 1.5 KB/305 ms mean/std 4.8 ms",
        published="shipping RLD's KV instead = 4,649 KB, mean 185 ms, peak 512.6 ms, plus 24.5 "
        "ms of GPU memory copy, exposed to WAN jitter and queueing; Extend-Decode = 1.5 KB, "
        "mean 305 ms, max 321.4 ms, std 4.8 ms",
        workload="one 100-token handoff (model-priced; bench/bench_handoff.py needs namespaces)",
        scenarios=("pdd", "pdd-kv-handoff"),
        sweep="",
        metrics=("kv_bytes", "kv_mean_ms", "ed_bytes", "ed_mean_ms"),
        check=_e7,
        check_text="KV bytes 2.3–9.3 MB, Extend-Decode 0.75–3 KB, Extend-Decode's mean above "
        "KV's (idle line); with the emulated WAN also Extend-Decode's std below KV's",
        cost=Cost(quick_s=2, full_s=2),
        run=run_e7_model,
        notes=(
            "without namespaces the model-priced version runs (labelled): the KV peak "
            "(WAN jitter and queueing behind other KV) is not modelled, so the std part of "
            "the check needs the emulated WAN",
        ),
    ),
    Experiment(
        id="E8",
        title="one-shot vs catch-up vs dynamic handoff",
        expected="one-shot: short RLD occupancy, MD stall; catch-up: smooth ITL, longer RLD "
        "occupancy",
        published="one-shot: MD must extend many tokens in one step, a visible stall; "
        "catch-up: smooth stream, RLD busy longer; the mode switches with RLD's load",
        workload=REPLAY,
        scenarios=("pdd-one-shot", "pdd-catch-up", "pdd"),
        sweep="handoff mode",
        metrics=("relay_tokens", "handoff_itl_max"),
        check=_e8,
        check_text="one-shot RLD tokens < catch-up's and one-shot handoff ITL max > catch-up's",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e8,
        needs_wan=True,
    ),
    Experiment(
        id="E9",
        title="allow P→RLD-only for low-hit requests",
        expected="MD hit rate drifts below P's, RLD overloads, collapse; PDD stays stable",
        published="MD's prefix hit rate drifts below P's, later turns look low-hit to MD and "
        "are routed to RLD too, RLD's load grows, and the feedback loop ends with RLD "
        "overloaded and the system collapsing",
        workload=REPLAY,
        scenarios=("pdd-rld-only", "pdd"),
        sweep="first vs second half",
        metrics=("relayed_share", "cached_tokens_reported"),
        check=_e9,
        check_text="rld-only: relayed share rises from 1st to 2nd half, and its MD hit in the "
        "2nd half is below PDD's",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e9,
        needs_wan=True,
        figure="relayed share per half",
    ),
    Experiment(
        id="E10",
        title="equal-cost comparison with BCR",
        expected="cost −3.5 … −7.1%, SLA goodput +27.8%, BCR up to +37.5%",
        published="PDD uses 43 × GPU A + 32 × GPU B + a dedicated line against 88 × GPU A: "
        "hardware cost −3.5% to −7.1%; SLA goodput +27.8%; BCR up to +37.5%",
        workload="capacity search per system (issue 14's equal-cost ladder)",
        scenarios=("same-dc-pd", "pdd"),
        sweep="offered load",
        metrics=("goodput", "bcr"),
        check=_never,
        check_text="BCR(pdd) / BCR(same-dc) − 1 in +18…+75%",
        cost=Cost(quick_s=900, full_s=3600),
        run=None,
        not_run_reason="delegated to the equal-cost capacity ladder (issue 14, "
        "`pddbench capacity`), not yet on this branch; it also needs the emulated WAN",
    ),
    Experiment(
        id="E11",
        title="decode-side prefix cache on/off in cross-DC PD",
        expected="large TTFT and throughput gains at ~90% reuse",
        published="Decode-side RadixCache keeps MD's hit rate aligned with P's; P sends only "
        "the suffix MD lacks (up to 10x less WAN traffic)",
        workload=REPLAY,
        scenarios=("cross-dc-pd", "cross-dc-pd-drc"),
        sweep="DRC off / on",
        metrics=("ttft.p50", "wan_bytes", "output_tps"),
        check=_e11,
        check_text="DRC on: lower TTFT P50 and < 1/3 of the WAN bytes",
        cost=Cost(quick_s=5, full_s=10),
        replayed=True,
        run=run_e11,
        needs_wan=True,
        figure="TTFT CDF",
    ),
    Experiment(
        id="E12",
        title="WAN bandwidth and jitter sweeps",
        expected="PDD's advantage grows as bandwidth drops or jitter rises",
        published="P → MD over TCP on the WAN: seconds to tens of seconds, observed 1–20 s "
        "swings; PDD hides the transfer of low-hit requests behind RLD",
        workload=REPLAY,
        scenarios=("cross-dc-pd", "pdd"),
        sweep="WAN rate, jitter, loss",
        metrics=("ttft.p50", "ttft.p99"),
        check=_never,
        check_text="PDD/naive TTFT ratio falls as rate drops and as jitter rises",
        cost=Cost(quick_s=900, full_s=3600),
        run=None,
        needs_wan=True,
        not_run_reason="a sweep of the emulated WAN's rate and jitter: needs network namespaces "
        "(not available to this run) and the WAN schedules of issue 16",
    ),
)


def by_id() -> dict[str, Experiment]:
    """The declarations by id; duplicate ids are a programming error."""
    out: dict[str, Experiment] = {}
    for e in EXPERIMENTS:
        if e.id in out:
            raise AssertionError(f"experiment {e.id} declared twice")
        if e.run is None and not e.not_run_reason:
            raise AssertionError(f"experiment {e.id} has no runner and no reason")
        out[e.id] = e
    return out


def select(names: tuple[str, ...]) -> list[Experiment]:
    """Experiments named on the command line (``all`` = every one), in table order."""
    table = by_id()
    wanted = set()
    for n in names:
        key = n.upper()
        if key == "ALL":
            wanted |= set(table)
        elif key in table:
            wanted.add(key)
        else:
            raise UserError(f"unknown experiment {n!r} (known: {', '.join(table)}, all)")
    return [e for e in EXPERIMENTS if e.id in wanted]


# one replay of one scenario (smoke profile, 60 requests at speedup 4, --no-emulation):
# measured 125-130 s on the 2-core machine; full (400 requests) assumed 4x
REPLAY_COST = Cost(quick_s=130, full_s=520)


def planned_costs(exps: list[Experiment], quick: bool, replayed: set[str]) -> list[float]:
    """Each experiment's declared seconds, a scenario's replay charged to its first user only."""
    seen = set(replayed)
    out = []
    for e in exps:
        new = [s for s in e.scenarios if s not in seen] if e.replayed and e.run else []
        seen.update(new)
        own = e.cost.of(quick) if e.run else 0.0  # not runnable: recorded as not run at once
        out.append(own + REPLAY_COST.of(quick) * len(new))
    return out


def total_cost(exps: list[Experiment], quick: bool, replayed: set[str] | None = None) -> float:
    return math.fsum(planned_costs(exps, quick, replayed or set()))
