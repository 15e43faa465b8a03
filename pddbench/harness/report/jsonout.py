"""The machine-readable report: every metric, breakdown and comparison as JSON.

Stable top-level keys: ``format`` ("pddbench.report"), ``version`` (1), ``generated_at``,
``sla`` {ttft_s, tpot_s, e2e_s, target_pct}, ``sla_source``, ``percentiles``,
``baseline`` (run label), ``runs`` [{label, run_id, scenario, path, cost, metrics{tag:
{unit, display_unit, direction, kind, value, stats{count, mean, min, max, pNN}}},
breakdowns{dimension: [{group, requests, share, metrics{tag: {...}}}]}, errors[...]}],
``headline`` {label: {key: {value, delta, verdict, text}}} (display units), ``costs``
[... with ``bcr_basis`` and the cost ``breakdown``], ``verdicts`` {label: {basis
("capacity" | "load-bounded" | "refused"), goodput, goodput_low, goodput_high, cost,
cost_text, bcr, load_bounded_bcr, ...}}, ``price_sensitivity`` [...], ``load``
{scenario: [...]}, ``main_verdict`` (the main job's verdict as ``main_verdict.json``
holds it, plus its ``sentence``; null when the run folders carry none). Values are in
each metric's *base* unit (seconds, fractions, bytes) in ``metrics``; NaN is written as
null.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from pddbench.harness.analysis.registry import MetricSet
from pddbench.harness.report.model import Report

FORMAT = "pddbench.report"
VERSION = 1


def _num(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(v)


def metrics_json(ms: MetricSet) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in ms:
        entry: dict[str, Any] = {
            "unit": str(r.unit),
            "display_unit": str(r.display_unit),
            "direction": str(r.direction),
            "kind": str(r.kind),
            "value": _num(r.value),
        }
        if r.dist is not None:
            entry["stats"] = {k: _num(v) for k, v in r.dist.as_dict().items()}
        out[r.tag] = entry
    return out


def main_verdict_json(report: Report) -> dict[str, Any] | None:
    """The main verdict's fields (NaN written as null) and its sentence, or None."""
    v = report.main_verdict
    if v is None:
        return None
    return {**json.loads(v.model_dump_json()), "sentence": v.sentence()}


def report_json(report: Report) -> dict[str, Any]:
    runs = []
    for run in report.runs:
        runs.append(
            {
                "label": run.label,
                "run_id": run.run_id,
                "scenario": run.scenario,
                "path": str(run.path) if run.path else None,
                "cost": run.cost.model_dump() if run.cost else None,
                "token_times": run.token_times,
                "metrics": metrics_json(run.metrics),
                "breakdowns": {
                    dim: [
                        {
                            "group": g.label,
                            "requests": g.requests,
                            "share": g.share,
                            "metrics": metrics_json(g.metrics),
                        }
                        for g in bd.groups
                    ]
                    for dim, bd in run.breakdowns.items()
                },
                "server": (
                    {k: _num(v) for k, v in dataclasses.asdict(run.server).items()}
                    if run.server is not None
                    else None
                ),
                "errors": [
                    {
                        "status": e.status,
                        "error_class": e.error_class,
                        "requests": e.requests,
                        "share": e.share,
                    }
                    for e in run.errors
                ],
            }
        )
    return {
        "format": FORMAT,
        "version": VERSION,
        "generated_at": report.generated_at,
        "sla": report.sla.model_dump(),
        "sla_source": report.sla_source,
        "percentiles": list(report.percentiles),
        "baseline": report.baseline.label,
        "wan_emulated": not report.unemulated,
        "wan_banner": report.wan_banner(),
        "virtual_time": report.virtual,
        "time_banner": report.time_banner(),
        "faults": [{"run": label, **f} for label, f in report.faults()],
        "fault_banner": report.fault_banner(),
        "main_verdict": main_verdict_json(report),
        "emulation": {label: st.model_dump() for label, st in report.emulation.items()},
        "runs": runs,
        "headline": {
            label: {
                c.key: {
                    "value": _num(c.value),
                    "delta": _num(c.delta),
                    "verdict": c.verdict or None,
                    "text": c.text,
                }
                for c in cells
            }
            for label, cells in report.headline.items()
        },
        "costs": [
            {
                "label": c.label,
                "cost": _num(c.cost),
                "cost_change": _num(c.cost_change),
                "goodput": _num(c.goodput),
                "goodput_change": _num(c.goodput_change),
                "bcr": _num(c.bcr),
                "bcr_basis": c.verdict.basis if c.verdict else None,
                "bcr_text": c.bcr_text,
                "bcr_change": _num(c.bcr_change),
                "cost_text": c.cost_text,
                "breakdown": [i.model_dump(mode="json") for i in c.breakdown],
            }
            for c in report.costs
        ],
        "verdicts": {label: v.model_dump(mode="json") for label, v in report.verdicts.items()},
        "price_sensitivity": [
            {
                "label": r.label,
                "hardware": r.hardware,
                "price": r.price,
                "cost": _num(r.cost),
                "cost_change": _num(r.cost_change),
                "bcr_change": _num(r.bcr_change),
            }
            for r in report.prices
        ],
        "load": {
            s: [
                {
                    "label": p.label,
                    "offered_rps": _num(p.offered_rps),
                    "goodput": _num(p.goodput),
                    "attainment": _num(p.attainment),
                }
                for p in pts
            ]
            for s, pts in report.load.items()
        },
        "notes": report.notes,
    }
