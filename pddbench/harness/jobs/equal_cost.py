"""The main job's equal-cost part: every system sized at the baseline's cost on the twin,
its emulated walk placed around the twin's capacity, and the verdict composed.

Owns :func:`chosen_scenario` (a sizing's chosen deployment as a scenario),
:func:`capacity_fields` (a walk's capacity as the crossing of the target reads it),
:func:`placed_ladder` (the ladder a system's walk starts from: its first rung below the
twin's capacity, the next above it) and :func:`system_verdict` / :func:`compose` (a
:class:`~pddbench.harness.rundir.main_verdict.MainVerdict` from the sizing rows and the
walks' verdicts: agreement, BCR, the BCR ratio with an interval from the capacities'
intervals, the binding resource). The sizing step and the walks themselves are
:mod:`~pddbench.harness.jobs.main_steps`' and the main job's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pddbench.errors import UserError
from pddbench.harness.analysis.crossing import METHOD, walk_capacity
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.rundir.main_verdict import MainVerdict, SystemVerdict
from pddbench.harness.sizing.result import SizedRow, SizingResult

PLACE_BELOW = 0.8  # the first rung, as a share of the twin's capacity (the next: x growth)
PLACED_GROWTH = 1.3  # rungs 0.8c, 1.04c, 1.35c: the capacity is bracketed on two rungs
MAIN_TOP = 3  # candidates per system the main job measures on the twin (time)


def chosen_scenario(result: SizingResult, fallback: Scenario) -> tuple[Scenario, SizedRow | None]:
    """The chosen deployment as a scenario (the scenario's own when nothing was chosen)."""
    row = result.chosen_row or result.builtin_row()
    if row is None or not row.scenario:
        return fallback, row
    try:
        return Scenario.model_validate(row.scenario), row
    except ValueError as exc:  # written by this run: a defect, said in one line
        raise UserError(f"{fallback.name}: the sized scenario does not load: {exc}") from None


def capacity_fields(walk: LadderVerdict) -> dict[str, Any]:
    """A walk's capacity as the verdict and the sizing rows hold it
    (:func:`~pddbench.harness.analysis.crossing.walk_capacity`)."""
    got = walk_capacity(walk)
    return {
        "basis": got.basis,
        "capacity": got.capacity,
        "capacity_low": got.capacity_low,
        "capacity_high": got.capacity_high,
        "capacity_rps": got.capacity_rps,
    }


def placed_ladder(
    settings: LadderSettings, origin_rps: float | None, twin_rps: float | None
) -> LadderSettings:
    """``settings`` with its first rung at :data:`PLACE_BELOW` × the twin's capacity
    (unchanged when either rate is unknown)."""
    if not origin_rps or not twin_rps or not math.isfinite(twin_rps) or twin_rps <= 0:
        return settings
    return dataclasses.replace(
        settings,
        start=PLACE_BELOW * twin_rps / origin_rps,
        growth=PLACED_GROWTH,
        max_load=None,
    )


def _interval_ratio(
    lo_a: float | None, hi_a: float | None, lo_b: float | None, hi_b: float | None, scale: float
) -> tuple[float | None, float | None]:
    """[a_lo / b_hi, a_hi / b_lo] × scale (None high: open; a 0 low stays 0)."""
    low = 0.0 if not lo_a or hi_b is None else lo_a / hi_b * scale
    high = None if hi_a is None or not lo_b else hi_a / lo_b * scale
    return low, high


def system_verdict(
    name: str,
    deployment: str,
    source: str,
    cost: float,
    cost_text: str,
    twin: SizedRow | None,
    walk: LadderVerdict | None,
    binding: tuple[str, str],
    reason: str = "",
) -> SystemVerdict:
    """One system's row before the ratio to the baseline."""
    emulated = lo = hi = None
    basis = "failed" if reason else "not run"
    if walk is not None:
        got = capacity_fields(walk)
        basis, emulated, lo, hi = (
            got[k] for k in ("basis", "capacity", "capacity_low", "capacity_high")
        )
    agreement, text = "unknown", "no emulated capacity or no twin capacity"
    if twin is not None and twin.capacity is not None and basis == "capacity":
        inside = (lo or 0.0) <= twin.capacity and (hi is None or twin.capacity <= hi)
        agreement = "agree" if inside else "disagree"
        text = (
            f"twin {twin.capacity:.3g} req/s {'inside' if inside else 'OUTSIDE'} the emulated "
            f"interval [{lo or 0:.3g}, {'open' if hi is None else f'{hi:.3g}'}]"
        )
    bcr = emulated / cost if emulated is not None and basis == "capacity" and cost > 0 else None
    return SystemVerdict(
        system=name,
        deployment=deployment,
        source="built-in" if source == "built-in" else "sized",
        cost=cost,
        cost_text=cost_text,
        twin_capacity=twin.capacity if twin else None,
        twin_low=twin.capacity_low if twin else None,
        twin_high=twin.capacity_high if twin else None,
        emulated_basis=basis,
        emulated_capacity=emulated,
        emulated_low=lo,
        emulated_high=hi,
        agreement=agreement,  # type: ignore[arg-type]
        agreement_text=text,
        bcr=bcr,
        binding=binding[0],
        binding_detail=binding[1],
        reason=reason or (walk.reason if walk is not None and bcr is None else ""),
    )


def with_ratio(row: SystemVerdict, base: SystemVerdict) -> SystemVerdict:
    """``row`` with its BCR ratio to ``base`` and that ratio's interval (from both
    capacities' intervals: conservative, every corner of the two)."""
    if row.bcr is None or base.bcr is None or base.bcr <= 0:
        return row
    scale = base.cost / row.cost
    lo, hi = _interval_ratio(
        row.emulated_low, row.emulated_high, base.emulated_low, base.emulated_high, scale
    )
    return row.model_copy(
        update={"bcr_ratio": row.bcr / base.bcr, "bcr_ratio_low": lo, "bcr_ratio_high": hi}
    )


def compose(
    rows: list[SystemVerdict],
    *,
    budget: float,
    sla_text: str,
    emulation: str,
    quick: bool,
    wall_s: float,
) -> MainVerdict:
    """The verdict over every system, the first row the baseline."""
    base = rows[0]
    out = [with_ratio(r, base) for r in rows]
    notes = [
        f"{r.system}: the twin and the emulated run DISAGREE ({r.agreement_text})"
        for r in out
        if r.agreement == "disagree"
    ]
    notes.append(f"capacities: {METHOD}")
    notes += [
        f"{r.system}: no BCR ({r.emulated_basis}{': ' + r.reason if r.reason else ''})"
        for r in out
        if r.bcr is None
    ]
    return MainVerdict(
        budget=budget,
        baseline=base.system,
        sla_text=sla_text,
        emulation=emulation,
        quick=quick,
        wall_s=wall_s,
        systems=out,
        notes=notes,
    )
