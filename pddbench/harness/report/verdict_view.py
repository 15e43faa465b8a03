"""The main job's verdict as the report's first screen shows it.

Owns the verdict table (one row per system: deployment and its source, cost, the twin's
and the emulated capacity with their intervals, agreement, BCR, the BCR ratio to the
baseline with its interval, the binding resource) and its note, as plain
:class:`~pddbench.harness.report.tables.Table` cells. The sentence is
:meth:`MainVerdict.sentence`'s; the renderers (``html``, ``markdown``) put the sentence,
this table and the verdict's notes above everything else, and only when the run folders
carry a verdict. Computes nothing: every figure arrives in the verdict.
"""

from __future__ import annotations

from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.rundir.main_verdict import MainVerdict, SystemVerdict

VERDICT_TABLE_ID = "verdict-table"


def _row(v: MainVerdict, s: SystemVerdict) -> tuple[TCell, ...]:
    baseline = s.system == v.baseline
    return (
        TCell(s.system + (" (baseline)" if baseline else "")),
        TCell(s.deployment, s.source),
        TCell(f"{s.cost:.4g}", s.cost_text),
        TCell(s.twin_text()),
        TCell(s.capacity_text()),
        TCell(s.agreement, s.agreement_text),
        TCell("-" if s.bcr is None else f"{s.bcr:.3g} ({s.bcr_source})", s.reason),
        TCell("baseline" if baseline else s.ratio_text(), s.check_text()),
        TCell("baseline" if baseline else s.emulated_ratio_text()),
        TCell(s.binding, s.binding_detail),
    )


def verdict_table(v: MainVerdict) -> Table:
    """The verdict per system, baseline first."""
    systems = sorted(v.systems, key=lambda s: s.system != v.baseline)
    note = (
        f"SLA: {v.sla_text}. "
        + (f"{v.emulation}. " if v.emulation else "")
        + "Capacities in req/s meeting the SLA, [low, high] their interval (open: no bound "
        "above); the twin's over several deployment seeds: the median seed's, the seeds' range "
        "beside it. Agreement: the check's twin (the emulated deployment with this host's "
        "per-hop costs, fitted on the walk's first point; its seeds' range) overlapping the "
        "emulated interval (one seed: inside it); unknown where that interval bounds nothing "
        "([0, open]). BCR = capacity ÷ cost, the twin's capacity (twin) checked by the "
        "emulated walk, or the walk's own (emulated); its ratio to "
        f"{v.baseline}'s as a difference with its interval (twin: the range over every pair "
        "of the two systems' seeds), the emulated walks' ratio beside it."
        + (" Run with --quick: wider intervals, traded for time." if v.quick else "")
        + (f" The main job took {v.wall_s / 60:.1f} min." if v.wall_s is not None else "")
    )
    return Table(
        f"The verdict at equal cost ({v.budget:g} {v.currency})",
        (
            "system",
            "deployment (source)",
            f"cost ({v.currency})",
            "twin capacity [interval]; seeds",
            "emulated capacity [interval]",
            "agreement",
            f"BCR (req/s per {v.currency})",
            f"BCR vs {v.baseline} [interval]",
            f"emulated BCR vs {v.baseline} [interval]",
            "binding resource",
        ),
        tuple(_row(v, s) for s in systems),
        note,
        numeric_from=2,
        numeric_to=8,
        id=VERDICT_TABLE_ID,
    )
