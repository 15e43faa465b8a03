"""The report's tables as plain text cells, shared by the HTML and Markdown renderers.

Owns which rows and columns each table has and how each number is written; knows
nothing about HTML or Markdown syntax (a cell is text, an optional second line — the
delta — and a class such as ``better`` / ``worse``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from pddbench.harness.analysis.breakdowns import Breakdown
from pddbench.harness.analysis.units import fmt
from pddbench.harness.report.model import Report
from pddbench.harness.rundir.ladder import LadderPoint, LadderVerdict, RequestMix


@dataclass(frozen=True)
class TCell:
    text: str
    sub: str = ""  # second line (a delta)
    cls: str = ""  # better | worse | same | muted | ""


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[TCell, ...], ...]
    note: str = ""
    numeric_from: int = 1  # columns from this index are right-aligned ...
    numeric_to: int | None = None  # ... up to (excluding) this one
    id: str = field(default="")
    collapsed: bool = False  # shown folded (HTML <details>)


def _pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v * 100:+.{digits}f} %"


def runs_table(report: Report) -> Table:
    rows = []
    for run in report.runs:
        m = run.metrics
        rows.append(
            (
                TCell(run.label + (" (baseline)" if run is report.baseline else "")),
                TCell(run.scenario),
                TCell(f"{m.value('requests'):,.0f}"),
                TCell(f"{m.value('ok_requests'):,.0f}"),
                TCell(fmt(m.value("duration"))),
                TCell(fmt(m.value("offered_rps"))),
                TCell(fmt(m.value("token_hit_rate") * 100)),
                TCell("yes" if run.token_times else "no"),
                TCell(str(run.path) if run.path else "-", cls="muted"),
            )
        )
    return Table(
        "Runs",
        (
            "run",
            "scenario",
            "requests",
            "ok",
            "window (s)",
            "offered (req/s)",
            "token hit rate (%)",
            "token times",
            "folder",
        ),
        tuple(rows),
        numeric_from=2,
        numeric_to=7,
        id="runs",
    )


def headline_table(report: Report) -> Table:
    rows = []
    for i, key in enumerate(report.headline_keys):
        row = [TCell(report.header_of(key))]
        for run in report.runs:
            cell = report.headline[run.label][i]
            row.append(TCell(cell.text, cell.delta_text, cell.verdict))
        rows.append(tuple(row))
    note = (
        f"Deltas against the baseline {report.baseline.label}: relative change, or "
        "percentage points (pp) for shares. Green: better, red: worse by the metric's "
        "direction; grey: within ±1 % (±0.1 pp)."
    )
    title = "Headline"
    if report.unemulated:
        title += " — WAN NOT EMULATED (loopback): " + ", ".join(report.unemulated)
    if report.virtual:
        title += " — VIRTUAL TIME (the twin): " + ", ".join(report.virtual)
    return Table(
        title,
        ("metric", *(r.label for r in report.runs)),
        tuple(rows),
        note,
        id="headline-table",
    )


def cost_table(report: Report) -> Table:
    rows = []
    for c in report.costs:
        rows.append(
            (
                TCell(c.label),
                TCell(c.cost_text),
                TCell(fmt(c.cost) if c.cost is not None else "-"),
                TCell(_pct(c.cost_change)),
                TCell(fmt(c.goodput)),
                TCell(_pct(c.goodput_change)),
                TCell(c.bcr_text),
                TCell(_pct(c.bcr_change), cls=_sign_cls(c.bcr_change)),
            )
        )
    return Table(
        "Cost and BCR",
        ("run", "cost breakdown", "cost", "Δ cost", "goodput (req/s)", "Δ goodput", "BCR", "Δ BCR"),
        tuple(rows),
        "BCR = SLA goodput at capacity ÷ hardware cost (Σ instances × chips × unit price + "
        "line); Δ against the baseline. A goodput measured below capacity (an ordinary "
        "replay, or a capacity search that met the target at every load) gives a "
        "load-bounded ratio: a lower bound, never the BCR.",
        numeric_from=2,
    )


def capacity_table(report: Report) -> Table:
    """How each system's goodput was found: the ladder, its interval and the basis."""
    rows = []
    for run in report.runs:
        v = report.verdicts[run.label]
        lad = run.ladder
        lo = "-" if v.goodput_low is None else f"{v.goodput_low:.3g}"
        hi = "open" if v.goodput_high is None else f"{v.goodput_high:.3g}"
        rows.append(
            (
                TCell(run.label),
                TCell(v.basis, cls="" if v.basis == "capacity" else "muted"),
                TCell("-" if v.goodput is None else f"{v.goodput:.3g}"),
                TCell(f"[{lo}, {hi}]" if v.basis == "capacity" else "-"),
                TCell(
                    "one replay at the offered load"
                    if lad is None
                    else f"{_rungs(lad)}{_bisected(lad.points)}; {lad.warmup_s:g} s warm-up + "
                    f"{_point_time(lad.point_s, lad.max_point_s, lad.min_requests)} a point; "
                    f"{len(lad.points)} points, {lad.measured_requests} measured requests"
                    f"{_mix_note(lad)}"
                ),
                TCell(v.reason),
            )
        )
    return Table(
        "SLA goodput at capacity",
        ("run", "basis", "goodput (req/s)", "interval (req/s)", "how it was found", "why"),
        tuple(rows),
        "Capacity = the offered rate where the shared ladder's SLA attainment, fitted "
        "non-increasing in rate, crosses the target; the goodput is the target's share of it. "
        "Each point replays its own stretch of the trace (steady state: every request "
        "of its window, sessions in progress continuing, caches primed from the trace's "
        "history). Interval: percentile bootstrap of binomial redraws of every point (95 %). "
        "load-bounded: no point missed the target, "
        "or the harness fell behind: a lower bound, not a capacity.",
        numeric_from=2,
        numeric_to=4,
    )


def _mix_note(lad: LadderVerdict) -> str:
    """``"; steady state: turn 0 2.2-4.1 % of requests, turn 0 and hit bins within 0.0 pp
    of the trace windows' as planned, 2.2 pp as measured"`` (empty for cold points)."""
    mixes = [(p.planned_mix, p.mix, p.trace_mix) for p in lad.points]
    pts = [(a, b, w) for a, b, w in mixes if a is not None and b is not None and w is not None]
    if not pts:
        return ""

    def off(a: RequestMix, b: RequestMix) -> float:
        pairs = [(a.turn0_share, b.turn0_share), *zip(a.hit_bins, b.hit_bins, strict=True)]
        return 100 * max(abs(x - y) for x, y in pairs)

    planned = max(off(a, w) for a, _, w in pts)
    measured = max(off(b, w) for _, b, w in pts)
    t0 = [a.turn0_share for a, _, _ in pts]
    return (
        f"; steady state: turn 0 {min(t0):.1%}-{max(t0):.1%} of requests, turn 0 and hit "
        f"bins within {planned:.1f} pp of the trace windows' as planned, {measured:.1f} pp "
        "as measured"
    )


def _rungs(lad: LadderVerdict) -> str:
    if lad.rungs_rps is None:
        return f"ladder x{', x'.join(f'{x:g}' for x in lad.loads)}"
    rates = ", ".join(f"{r:.3g}" for r in lad.rungs_rps)
    return f"ladder of offered rates {rates} req/s (load scale per point from the trace)"


def _bisected(points: list[LadderPoint]) -> str:
    loads = [p.label() for p in points if p.bisect]
    return f" + bisection {', '.join(loads)}" if loads else ""


def _point_time(point_s: float, max_point_s: float | None, min_requests: int) -> str:
    if max_point_s is None or max_point_s <= point_s or min_requests <= 0:
        return f"{point_s:g} s"
    return f"{point_s:g}-{max_point_s:g} s (until the trace offers {min_requests} requests)"


def price_table(report: Report) -> Table:
    """The cost verdict with each non-unit GPU type (B) at 0.8, 1.0 and 1.25 A."""
    rows = tuple(
        (
            TCell(r.label),
            TCell(f"{r.hardware} = {r.price:g}"),
            TCell(fmt(r.cost)),
            TCell(_pct(r.cost_change)),
            TCell(_pct(r.bcr_change), cls=_sign_cls(r.bcr_change)),
        )
        for r in report.prices
    )
    return Table(
        "B:A price sensitivity",
        ("run", "unit price (A = 1)", "cost", "Δ cost", "Δ BCR"),
        rows,
        "The B:A price ratio is an assumption (PDD.md: B costs 1.2-1.3 A); goodput as "
        "measured, only the price of the non-A GPU type changes.",
        numeric_from=2,
    )


def _sign_cls(v: float | None) -> str:
    if v is None or not math.isfinite(v) or abs(v) < 0.01:
        return ""
    return "better" if v > 0 else "worse"


def scalar_table(report: Report, title: str, keys: tuple[str, ...]) -> Table:
    rows = []
    for key in keys:
        row = [TCell(report.header_of(key))]
        for run in report.runs:
            row.append(TCell(fmt(run.metrics.shown(key))))
        rows.append(tuple(row))
    return Table(title, ("metric", *(r.label for r in report.runs)), tuple(rows))


def error_tables(report: Report) -> list[Table]:
    out = []
    for run in report.runs:
        rows = tuple(
            (
                TCell(e.status),
                TCell(e.error_class),
                TCell(f"{e.requests:,}"),
                TCell(f"{e.share * 100:.2f}"),
            )
            for e in run.errors
        )
        out.append(
            Table(
                f"{run.label}",
                ("status", "error class", "requests", "% of records"),
                rows,
                "" if rows else "every request ended ok",
                numeric_from=2,
            )
        )
    return out


BREAKDOWN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ttft.p50", "TTFT P50 (ms)"),
    ("ttft.p99", "TTFT P99 (ms)"),
    ("tpot.p50", "TPOT P50 (ms)"),
    ("e2e.p99", "E2E P99 (s)"),
    ("sla_attainment", "SLA met (%)"),
    ("goodput", "goodput (req/s)"),
    ("error_rate", "errors (%)"),
    ("censored_rate", "censored (%)"),
    ("wan_bytes_req.mean", "WAN MB/req"),
    ("rld_token_share", "RLD tokens (%)"),
)


def breakdown_table(run_label: str, bd: Breakdown) -> Table:
    rows = []
    for g in bd.groups:
        row = [TCell(g.label), TCell(f"{g.requests:,}"), TCell(f"{g.share * 100:.1f}")]
        for key, _ in BREAKDOWN_COLUMNS:
            v = g.metrics.shown(key)
            if key.startswith("wan_bytes_req"):
                v = g.metrics.value(key) / 1e6
            row.append(TCell(fmt(v)))
        rows.append(tuple(row))
    return Table(
        f"{run_label} — {bd.title}",
        ("group", "requests", "%", *(h for _, h in BREAKDOWN_COLUMNS)),
        tuple(rows),
        collapsed=True,
    )


def links_table(report: Report) -> Table | None:
    rows = []
    keys: list[str] = []
    for run in report.runs:
        for link in run.links:
            for k in link:
                if k not in keys and k not in ("run_id", "t_unix"):
                    keys.append(k)
    if not keys:
        return None
    for run in report.runs:
        for link in run.links:
            rows.append((TCell(run.label), *(TCell(_cell_text(link.get(k))) for k in keys)))
    return Table("Link probes", ("run", *keys), tuple(rows), numeric_from=2)


def server_table(report: Report) -> Table | None:
    """The servers' prefix-cache and queue counters beside the client's own figures."""
    runs = [r for r in report.runs if r.server is not None]
    if not runs:
        return None

    def share(v: float) -> str:
        return f"{v * 100:.1f} %" if math.isfinite(v) else "-"

    def ms(v: float) -> str:
        return f"{fmt(v * 1000)} ms" if math.isfinite(v) else "-"

    rows = []
    for run in runs:
        s = run.server
        assert s is not None
        rows.append(
            (
                TCell(run.label),
                TCell(share(s.prefix_hit_rate)),
                TCell(share(run.metrics.value("token_hit_rate"))),
                TCell(fmt(run.metrics.value("cache_fidelity"))),
                TCell(fmt(s.prompt_tokens_computed)),
                TCell(fmt(s.waiting_mean)),
                TCell(fmt(s.waiting_max)),
                TCell(ms(s.queue_time_mean_s)),
                TCell(f"{s.instances} / {s.scrapes}"),
            )
        )
    return Table(
        "Servers' own counters",
        (
            "run",
            "server prefix-cache hit",
            "client token hit rate",
            "cache fidelity",
            "prompt tokens computed",
            "waiting (mean)",
            "waiting (peak)",
            "time queued (mean)",
            "instances / scrapes",
        ),
        tuple(rows),
        "Server columns: Δ of each instance's counters over the run (hit tokens / queried "
        "tokens; prefill tokens), requests waiting over the scrapes, Δ queue-time sum / count. "
        "'-': no instance exports that series. Client columns: from requests.parquet.",
    )


def _cell_text(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return fmt(v)
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return str(v)


# The definitions table's columns: header, and the metric declaration shown in it.
DEFINITION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tag", "tag"),
    ("name", "header"),
    ("unit", "shown_in"),
    ("records", "applies_to"),
    ("better", "direction"),
    ("definition", "description"),
)


def definitions_table(report: Report) -> Table:
    rows = tuple(
        (
            *(TCell(str(getattr(metric, attr))) for _, attr in DEFINITION_COLUMNS),
            TCell(metric.nan_means, cls="muted"),
        )
        for metric in report.registry
    )
    return Table(
        "Metric definitions",
        (*(header for header, _ in DEFINITION_COLUMNS), "NaN / '-' means"),
        rows,
        f"Percentiles: numpy linear interpolation; computed: "
        f"{', '.join(f'P{p:g}' for p in report.percentiles)}.",
        numeric_from=99,
    )
