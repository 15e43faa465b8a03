"""The metric catalog: one row of declarations per metric, the table the registry reads.

Each row names a metric's tag, header, unit and display unit, the records it applies to,
which direction is better, what it needs, the smallest change a regression check trusts,
what it means and what NaN means for it — and where its numbers come from: a records
column, or a computation in this package's subject modules (``latency``, ``throughput``,
``goodput``, ``cache``, ``pdd``, ``session``). Adding a metric is adding one row. Rows are
grouped by subject; the order is the registry's order.
"""

from __future__ import annotations

from pddbench.harness.analysis.metrics import cache, goodput, latency, pdd, session, throughput
from pddbench.harness.analysis.metrics.throughput import column_sum, count, per_window
from pddbench.harness.analysis.registry import Applies, Direction, Metric, declare
from pddbench.harness.analysis.units import Unit

S, MS = Unit.SECONDS, Unit.MILLISECONDS
FRACTION, PERCENT = Unit.FRACTION, Unit.PERCENT
OK, SENT = Applies.OK, Applies.SENT
LOWER, HIGHER = Direction.LOWER, Direction.HIGHER
NO_WINDOW = "the run window is undefined (empty run)"
FEW_TOKENS = "no ok request with 2 or more output tokens"

# The latency, rate and SLA figures that a report's headline leads with and that the
# regression check watches by default.
CORE_KEYS: tuple[str, ...] = (
    "ttft.p50",
    "ttft.p90",
    "ttft.p99",
    "tpot.p50",
    "tpot.p99",
    "itl_mean",
    "e2e.p99",
    "completed_rps",
    "goodput",
    "sla_attainment",
)

METRICS: tuple[type[Metric], ...] = (
    # prefix cache
    declare(
        "hit_rate", "prefix hit rate", FRACTION, PERCENT, values=cache.hit_rates,
        what="per request: cached_tokens_theoretical / input_tokens (reported where the "
        "theoretical value is missing)",
        nan="no request with known cached tokens",
    ),
    declare(
        "token_hit_rate", "token-weighted hit rate", FRACTION, PERCENT,
        compute=cache.token_hit_rate,
        what="Σ cached tokens / Σ input tokens over requests with a known hit rate",
        nan="no request with known cached tokens",
    ),
    declare(
        "cache_fidelity", "cache fidelity", Unit.RATIO, applies=OK, compute=cache.fidelity,
        what="Σ reported cached tokens / Σ theoretical, over ok requests with both known",
        nan="the server did not report cached tokens, or the trace has none",
    ),
    declare(
        "cache_fidelity_req", "cache fidelity per request", Unit.RATIO, applies=OK,
        values=cache.fidelity_per_request,
        what="per ok request with theoretical cached tokens > 0: reported / theoretical",
        nan="no ok request with both values known and a theoretical hit",
    ),
    declare(
        "cache_exact_share", "cached tokens exact", FRACTION, PERCENT, applies=OK,
        compute=cache.exact_share,
        what="share of ok requests (both values known) whose reported == theoretical",
        nan="no ok request with both values known",
    ),
    # SLA attainment, goodput, errors, BCR
    declare(
        "sla_attainment", "SLA attainment", FRACTION, PERCENT, better=HIGHER, min_change=0.005,
        compute=goodput.attainment(lambda c: c.met),
        what="share of sent requests meeting every SLA target (failures count as misses)",
        nan="nothing was sent",
    ),
    *(
        declare(
            f"sla_attainment_{target}", f"{target.upper()} target met", FRACTION, PERCENT,
            better=HIGHER, min_change=0.005, compute=goodput.attainment(check),
            what=f"share of sent requests that are ok and meet the {target.upper()} target",
            nan="nothing was sent",
        )
        for target, check in (
            ("ttft", lambda c: c.ttft_ok),
            ("tpot", lambda c: c.tpot_ok),
            ("e2e", lambda c: c.e2e_ok),
        )
    ),
    declare(
        "goodput", "SLA goodput", Unit.REQ_PER_S, better=HIGHER, requires=("duration",),
        min_change=0.01, compute=per_window(goodput.met_count),
        what="requests meeting every SLA target per second of the run window",
        nan=NO_WINDOW,
    ),
    declare(
        "error_rate", "error rate", FRACTION, PERCENT, better=LOWER, min_change=0.005,
        compute=goodput.error_rate,
        what="records whose status is not ok (error, timeout, cancelled, skipped) ÷ records",
        nan="no records",
    ),
    declare(
        "bcr", "BCR", Unit.REQ_PER_S_PER_COST, better=HIGHER, requires=("goodput",),
        compute=goodput.benefit_cost,
        what="benefit-cost ratio: SLA goodput ÷ the scenario's hardware cost",
        nan="the scenario declares no cost model",
    ),
    # latency
    declare(
        "ttft", "TTFT", S, MS, applies=OK, better=LOWER, min_change=0.005, values="ttft_s",
        what="time to first token: first token-carrying chunk − actual send, per ok request",
        nan="no ok request produced a token",
    ),
    declare(
        "tpot", "TPOT", S, MS, applies=OK, better=LOWER, min_change=0.0005, values="tpot_s",
        what="time per output token after the first: (last − first token) / (output tokens − 1), "
        "per ok request with at least 2 output tokens",
        nan=FEW_TOKENS,
    ),
    declare(
        "itl", "ITL (token-level)", S, MS, applies=OK, better=LOWER, min_change=0.0005,
        values=latency.token_intervals,
        what="every inter-token interval of every ok request, pooled (each token counts once); "
        "needs token_times_s",
        nan="token_times_s was not recorded (see itl_mean, itl_req_p99)",
    ),
    declare(
        "itl_mean", "ITL mean (token-weighted)", S, MS, applies=OK, better=LOWER,
        min_change=0.0005, compute=latency.itl_mean,
        what="Σ(last − first token) / Σ(output tokens − 1) over ok requests",
        nan=FEW_TOKENS,
    ),
    declare(
        "itl_req_p99", "per-request P99 ITL", S, MS, applies=OK, better=LOWER,
        min_change=0.0005, values="itl_p99_s",
        what="one value per ok request: its own P99 inter-token interval; percentiles are over "
        "requests, not tokens",
        nan=FEW_TOKENS,
    ),
    declare(
        "itl_req_max", "per-request max ITL", S, MS, applies=OK, better=LOWER, min_change=0.001,
        values="itl_max_s",
        what="one value per ok request: its largest inter-token interval (stalls, seams)",
        nan=FEW_TOKENS,
    ),
    declare(
        "e2e", "E2E latency", S, applies=OK, better=LOWER, min_change=0.01, values="e2e_s",
        what="end of the response − actual send, per ok request",
        nan="no ok requests",
    ),
    declare(
        "client_queue", "client queueing", S, MS, applies=SENT, better=LOWER, min_change=0.001,
        values="client_queue_s",
        what="time a sent request waited for the client's concurrency cap (0 without one)",
        nan="nothing was sent",
    ),
    declare(
        "schedule_lag", "schedule lag", S, MS, applies=SENT, better=LOWER, min_change=0.001,
        values=lambda records, ctx: records.schedule_lag_s,
        what="actual send − intended send − client queueing, per sent request: how late the "
        "engine was beyond any wait for the concurrency cap (large values: an overloaded client)",
        nan="nothing was sent",
    ),
    # PDD: RLD share, WAN traffic, handoff spikes
    declare(
        "rld_token_share", "RLD share of output tokens", FRACTION, PERCENT, applies=OK,
        compute=pdd.relay_token_share,
        what="Σ relay_tokens / Σ output_tokens over ok requests that report relay_tokens",
        nan="the server did not report relay_tokens (not a PDD deployment)",
    ),
    declare(
        "relayed_share", "relayed requests", FRACTION, PERCENT, applies=OK,
        compute=pdd.relayed_share,
        what="share of ok requests that took P→RLD→MD",
        nan="no ok requests, or no pipeline information",
    ),
    declare(
        "wan_bytes", "WAN bytes", Unit.BYTES, Unit.GIGABYTES, better=LOWER,
        compute=pdd.wan_bytes_total,
        what="Σ wan_bytes over all records that report it (failed ones moved bytes too)",
        nan="the server did not report wan_bytes",
    ),
    declare(
        "wan_bytes_req", "WAN bytes per request", Unit.BYTES, Unit.GIGABYTES, applies=OK,
        better=LOWER, values="wan_bytes",
        what="wan_bytes of each ok request that reports it",
        nan="the server did not report wan_bytes",
    ),
    declare(
        "wan_bandwidth", "effective WAN bandwidth", Unit.BIT_PER_S, Unit.GBIT_PER_S,
        requires=("wan_bytes", "duration"), compute=pdd.wan_bandwidth,
        what="8 × Σ wan_bytes / run window: the average WAN rate the run needed",
        nan="wan_bytes not reported, or the run window is undefined",
    ),
    declare(
        "handoff_itl_max", "max ITL, relayed requests", S, MS, applies=Applies.OK_RELAYED,
        better=LOWER, min_change=0.001, values="itl_max_s",
        what="per relayed ok request: its largest inter-token interval (the handoff seam)",
        nan="no relayed ok requests",
    ),
    declare(
        "direct_itl_max", "max ITL, direct requests", S, MS, applies=Applies.OK_DIRECT,
        better=LOWER, min_change=0.001, values="itl_max_s",
        what="per ok request not relayed: its largest inter-token interval",
        nan="every ok request was relayed, or none is ok",
    ),
    declare(
        "handoff_spike", "handoff ITL spike", Unit.RATIO, better=LOWER,
        requires=("handoff_itl_max", "direct_itl_max"), compute=pdd.handoff_spike,
        what="median max-ITL of relayed requests ÷ median max-ITL of direct requests",
        nan="no relayed or no direct ok requests",
    ),
    # sessions (agent tasks)
    declare(
        "sessions", "sessions", Unit.SESSIONS, compute=session.session_count,
        what="distinct session ids among the records",
        nan="never NaN",
    ),
    declare(
        "task_completion", "task completion time", S, better=LOWER, min_change=0.1,
        values=session.task_completion_times,
        what="per complete session (every request ok): last end − first intended send, "
        "tool/think time included",
        nan="no complete session",
    ),
    declare(
        "session_sla_attainment", "sessions meeting SLA", FRACTION, PERCENT, better=HIGHER,
        min_change=0.005, compute=session.session_attainment,
        what="share of sessions whose every request met every SLA target",
        nan="no sessions",
    ),
    declare(
        "session_goodput", "session goodput", Unit.SESSIONS_PER_S, better=HIGHER,
        requires=("duration",), min_change=0.001, compute=per_window(session.sessions_met),
        what="sessions whose every request met the SLA, per second of the run window",
        nan=NO_WINDOW,
    ),
    # counts, run window, rates, token throughput
    declare(
        "requests", "requests", Unit.REQUESTS, compute=count,
        what="records of any status (skipped ones included)",
        nan="never NaN (0 for an empty run)",
    ),
    declare(
        "ok_requests", "ok requests", Unit.REQUESTS, applies=OK, compute=count,
        what="records with status ok",
        nan="never NaN",
    ),
    declare(
        "duration", "run window", S, compute=throughput.window,
        what="first intended send to last end, over all records",
        nan="no records, or none ended",
    ),
    declare(
        "offered_rps", "offered load", Unit.REQ_PER_S, compute=throughput.offered_rps,
        what="records / (last intended send − first intended send): the schedule's rate",
        nan="fewer than two records, or all intended at the same instant",
    ),
    declare(
        "completed_rps", "completed RPS", Unit.REQ_PER_S, applies=OK, better=HIGHER,
        requires=("duration",), min_change=0.01,
        compute=per_window(lambda records, ctx: float(records.n)),
        what="ok requests per second of the run window",
        nan=NO_WINDOW,
    ),
    declare(
        "output_tps", "output token throughput", Unit.TOK_PER_S, applies=OK, better=HIGHER,
        requires=("duration",), min_change=1.0, compute=per_window(column_sum("output_tokens")),
        what="output tokens of ok requests per second of the run window",
        nan=NO_WINDOW,
    ),
    declare(
        "input_tps", "input token throughput", Unit.TOK_PER_S, applies=OK, better=HIGHER,
        requires=("duration",), min_change=1.0, compute=per_window(column_sum("input_tokens")),
        what="prompt tokens (cached ones included) of ok requests per second of the window",
        nan=NO_WINDOW,
    ),
)
