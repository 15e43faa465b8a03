"""The report's sections: which figures and tables each one holds, and why one may be empty.

Owns the content plan shared by the HTML and Markdown renderers: for each section id in
``model.SECTIONS`` the figures to draw, the tables to show, and the sentence to print
when a figure cannot be drawn. Draws by calling the figure modules; renders nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pddbench.harness.report import figures_latency as fl
from pddbench.harness.report import figures_system as fs
from pddbench.harness.report import figures_wan as fw
from pddbench.harness.report.figstyle import FigureOut
from pddbench.harness.report.model import SECTIONS, Report
from pddbench.harness.report.tables import (
    Table,
    breakdown_table,
    capacity_table,
    cost_table,
    definitions_table,
    error_tables,
    headline_table,
    links_table,
    price_table,
    runs_table,
    scalar_table,
    server_table,
)

FigureFn = Callable[[Report], FigureOut | None]

FIGURES: dict[str, tuple[FigureFn, str]] = {
    "ttft-cdf": (fl.ttft_cdf, "no ok request has a TTFT"),
    "ttft-timeline": (fw.ttft_timeline, "no ok request has a TTFT"),
    "latency-percentiles": (fl.latency_bars, "no ok requests"),
    "ttft-by-hit-bin": (fl.ttft_by_hit_bin, "no request has a known hit rate"),
    "load": (
        fs.load_curves,
        "needs two or more runs of one scenario at different loads, or a capacity curve "
        "(capacity.json in a run folder, or --capacity FILE)",
    ),
    "bcr": (fs.bcr_bars, "no run's scenario declares a cost model (scenario.cost)"),
    "bathtub": (fs.bathtub, "too few ok requests with a known hit rate"),
    "hit-bins-over-time": (fs.hit_shares, "no request has a known hit rate"),
    "handoff": (
        fs.handoff,
        "no relayed requests (needs relay_tokens / a P→RLD→MD pipeline from the server)",
    ),
    "wan": (fs.wan, "the servers did not report wan_bytes"),
    "sessions": (fl.task_cdf, "no complete session"),
}


@dataclass
class Section:
    id: str
    title: str
    figures: list[FigureOut] = field(default_factory=list)
    missing: str = ""  # why the figure is absent
    tables: list[Table] = field(default_factory=list)
    manifests: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    intro: str = ""


def _keys(
    report: Report, tags: tuple[str, ...], stats: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    pct = tuple(f"p{p:g}" for p in report.percentiles)
    stats = stats or ("mean", *pct)
    return tuple(f"{t}.{s}" for t in tags for s in stats)


def build_sections(report: Report) -> list[Section]:
    out: list[Section] = []
    for sid, title in SECTIONS:
        sec = Section(sid, title)
        if sid in FIGURES:
            fn, why = FIGURES[sid]
            fig = fn(report)
            if fig is None:
                sec.missing = why
            else:
                sec.figures.append(fig)
        _fill(report, sec)
        out.append(sec)
    return out


def _fill(report: Report, sec: Section) -> None:
    sid = sec.id
    if sid == "headline":
        sec.tables += [runs_table(report), headline_table(report)]
    elif sid == "latency-percentiles":
        sec.tables.append(
            scalar_table(
                report,
                "Latency (all percentiles)",
                (
                    *_keys(report, ("ttft", "tpot", "itl", "itl_req_p99", "e2e")),
                    "itl_mean",
                    *_keys(report, ("client_queue", "schedule_lag"), ("mean", "p99")),
                ),
            )
        )
        sec.intro = (
            "itl = token-level (each token once; needs token_times_s); itl_mean = "
            "token-weighted mean from first/last token times; itl_req_p99 = each "
            "request's own P99, summarised over requests (not a token-level P99)."
        )
    elif sid == "ttft-by-hit-bin":
        sec.tables.append(
            scalar_table(
                report,
                "Prefix cache",
                (
                    "token_hit_rate",
                    "hit_rate.p50",
                    "cache_fidelity",
                    "cache_fidelity_req.p50",
                    "cache_exact_share",
                ),
            )
        )
        for run in report.runs:
            if "hit_bin" in run.breakdowns:
                sec.tables.append(breakdown_table(run.label, run.breakdowns["hit_bin"]))
    elif sid == "load":
        sec.tables.append(
            scalar_table(
                report, "Load", ("offered_rps", "completed_rps", "goodput", "sla_attainment")
            )
        )
    elif sid == "bcr":
        sec.tables.append(cost_table(report))
        sec.tables.append(capacity_table(report))
        if report.prices:
            sec.tables.append(price_table(report))
    elif sid == "handoff":
        sec.tables.append(
            scalar_table(
                report,
                "Relay and handoff",
                (
                    "relayed_share",
                    "rld_token_share",
                    "handoff_itl_max.p50",
                    "handoff_itl_max.p99",
                    "direct_itl_max.p50",
                    "direct_itl_max.p99",
                    "handoff_spike",
                ),
            )
        )
    elif sid == "wan":
        sec.tables.append(
            scalar_table(
                report,
                "WAN",
                ("wan_bytes", "wan_bandwidth", "wan_bytes_req.mean", "wan_bytes_req.p99"),
            )
        )
    elif sid == "sessions":
        sec.tables.append(
            scalar_table(
                report,
                "Sessions",
                (
                    "sessions",
                    "task_completion.p50",
                    "task_completion.p90",
                    "task_completion.p99",
                    "session_sla_attainment",
                    "session_goodput",
                ),
            )
        )
    elif sid == "errors":
        sec.tables.append(scalar_table(report, "Error rate", ("error_rate", "censored_rate")))
        sec.tables += error_tables(report)
    elif sid == "breakdowns":
        for run in report.runs:
            for dim, bd in run.breakdowns.items():
                if dim != "hit_bin":
                    sec.tables.append(breakdown_table(run.label, bd))
    elif sid == "server":
        why = "no server_metrics.parquet in the runs (deployed runs scrape /metrics)"
        _table_or_missing(sec, server_table(report), why)
    elif sid == "links":
        why = "no link probes in the runs (manifest links / links.parquet)"
        _table_or_missing(sec, links_table(report), why)
    elif sid == "manifests":
        sec.manifests = [(r.label, r.manifest.to_json() if r.manifest else {}) for r in report.runs]
    elif sid == "definitions":
        sec.tables.append(definitions_table(report))


def _table_or_missing(sec: Section, table: Table | None, why: str) -> None:
    if table is None:
        sec.missing = why
    else:
        sec.tables.append(table)
