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
from pddbench.harness.rundir.main_verdict import BcrSource, MainVerdict, SystemVerdict
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
    bcr_source: BcrSource = "twin",
    check: SizedRow | None = None,
    host_s: float | None = None,
) -> SystemVerdict:
    """One system's row before the ratio to the baseline. Its BCR is the twin's capacity ÷
    cost when ``bcr_source`` is ``"twin"`` and the twin found a capacity, else the walk's
    (``"emulated"``: a run whose walk is the twin itself, or one without a twin); the
    walk's own BCR is kept beside it as the check's. ``check``: the twin of the emulated
    deployment (this host's costs, ``host_s`` a request, added to the hardware's twin):
    the agreement is read against it, like against like; without it, against ``twin``."""
    emulated = lo = hi = None
    basis = "failed" if reason else "not run"
    if walk is not None:
        got = capacity_fields(walk)
        basis, emulated, lo, hi = (
            got[k] for k in ("basis", "capacity", "capacity_low", "capacity_high")
        )
    agreement, text = agree(check or twin, basis, lo, hi)
    if check is not None and host_s is not None:
        text = f"with this host's costs ({host_s * 1e3:.0f} ms a request): {text}"
    walk_bcr = (
        emulated / cost if emulated is not None and basis == "capacity" and cost > 0 else None
    )
    twin_bcr = twin.capacity / cost if twin is not None and twin.bcr is not None else None
    use_twin = bcr_source == "twin" and twin_bcr is not None
    bcr = twin_bcr if use_twin else walk_bcr
    return SystemVerdict(
        system=name,
        deployment=deployment,
        source="built-in" if source == "built-in" else "sized",
        cost=cost,
        cost_text=cost_text,
        twin_capacity=twin.capacity if twin else None,
        twin_low=twin.capacity_low if twin else None,
        twin_high=twin.capacity_high if twin else None,
        twin_seeds=list(twin.seed_capacities) if twin else [],
        check_capacity=check.capacity if check else None,
        check_seeds=list(check.seed_capacities) if check else [],
        host_s=host_s if check else None,
        emulated_basis=basis,
        emulated_capacity=emulated,
        emulated_low=lo,
        emulated_high=hi,
        agreement=agreement,  # type: ignore[arg-type]
        agreement_text=text,
        bcr=bcr,
        bcr_source="twin" if use_twin else "emulated",
        emulated_bcr=walk_bcr,
        binding=binding[0],
        binding_detail=binding[1],
        reason=reason or (walk.reason if walk is not None and bcr is None else ""),
    )


def agree(twin: SizedRow | None, basis: str, lo: float | None, hi: float | None) -> tuple[str, str]:
    """Whether the twin and the emulated walk agree, and how it was read. One twin seed:
    its capacity inside the emulated interval [``lo``, ``hi``]. Several seeds: their range
    overlaps that interval: near saturation a seed is one draw of the servers' randomness
    (the range, not the median alone, is what the twin says), and the emulated interval is
    what the emulated walk says; two statements that overlap cannot be told apart. An
    emulated interval of [0, open] bounds nothing: no check ("unknown"), never an agreement
    by default."""
    if twin is None or twin.capacity is None or basis != "capacity":
        return "unknown", "no emulated capacity or no twin capacity"
    low, high = lo or 0.0, math.inf if hi is None else hi
    interval = f"[{low:.3g}, {'open' if hi is None else f'{hi:.3g}'}]"
    if low <= 0 and hi is None:
        return "unknown", (
            f"no check: the emulated interval {interval} bounds nothing (twin "
            f"{twin.capacity:.3g} req/s)"
        )
    seeds = [c for c in twin.seed_capacities if c is not None]
    if len(twin.seed_capacities) > 1 and seeds:
        ok = min(seeds) <= high and max(seeds) >= low
        return ("agree" if ok else "disagree"), (
            f"twin {twin.capacity:.3g} req/s (over {len(twin.seed_capacities)} seeds "
            f"{twin.seeds_text()}) {'overlaps' if ok else 'does NOT overlap'} the emulated "
            f"interval {interval}"
        )
    inside = low <= twin.capacity <= high
    return ("agree" if inside else "disagree"), (
        f"twin {twin.capacity:.3g} req/s {'inside' if inside else 'OUTSIDE'} the emulated "
        f"interval {interval}"
    )


def with_ratio(row: SystemVerdict, base: SystemVerdict) -> SystemVerdict:
    """``row`` with its BCR ratio to ``base`` and that ratio's interval, and the emulated
    walks' ratio beside it (the check's). Twin BCRs: the interval is the range over every
    pair of the two systems' deployment seeds (each seed's capacity ÷ cost against each of
    the baseline's); with one seed, every corner of the two twin intervals. Emulated BCRs:
    every corner of the two emulated intervals (conservative). BCRs of different sources
    give no ratio. The baseline against itself is 1 exactly (its seeds against each other
    would give a spread that is no comparison)."""
    if row.system == base.system:
        own: dict[str, float] = {}
        if row.bcr is not None:
            own |= {"bcr_ratio": 1.0, "bcr_ratio_low": 1.0, "bcr_ratio_high": 1.0}
        if row.emulated_bcr is not None:
            own |= {"emulated_ratio": 1.0, "emulated_ratio_low": 1.0, "emulated_ratio_high": 1.0}
        return row.model_copy(update=own)
    scale = base.cost / row.cost if row.cost > 0 else math.nan
    update: dict[str, Any] = {}
    if row.emulated_bcr is not None and base.emulated_bcr:
        lo, hi = _interval_ratio(
            row.emulated_low, row.emulated_high, base.emulated_low, base.emulated_high, scale
        )
        update |= {
            "emulated_ratio": row.emulated_bcr / base.emulated_bcr,
            "emulated_ratio_low": lo,
            "emulated_ratio_high": hi,
        }
    if row.bcr is not None and base.bcr and row.bcr_source == base.bcr_source:
        if row.bcr_source == "emulated":
            lo, hi = update.get("emulated_ratio_low"), update.get("emulated_ratio_high")
        else:
            lo, hi = _seed_ratio(row.twin_seeds, base.twin_seeds, scale) or _interval_ratio(
                row.twin_low, row.twin_high, base.twin_low, base.twin_high, scale
            )
        update |= {"bcr_ratio": row.bcr / base.bcr, "bcr_ratio_low": lo, "bcr_ratio_high": hi}
    elif row.bcr is not None and base.bcr:
        update["reason"] = (
            f"no ratio: its BCR is the {row.bcr_source} capacity's, {base.system}'s the "
            f"{base.bcr_source}'s"
        )
    return row.model_copy(update=update) if update else row


def _seed_ratio(
    seeds: list[float | None], base_seeds: list[float | None], scale: float
) -> tuple[float, float] | None:
    """The range of ``seed / base seed × scale`` over every pair (None: fewer than two
    seeds on either side, or a baseline seed without a positive capacity)."""
    a = [c for c in seeds if c is not None]
    b = [c for c in base_seeds if c is not None]
    if len(seeds) < 2 or len(base_seeds) < 2 or not a or not b or min(b) <= 0:
        return None
    return min(a) / max(b) * scale, max(a) / min(b) * scale


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
    if any(r.bcr_source == "twin" and r.bcr is not None for r in out):
        seeds = max(len(r.twin_seeds) for r in out)
        notes.append(
            "BCR: the twin's capacity"
            + (f" (the median of {seeds} deployment seeds)" if seeds > 1 else "")
            + " ÷ cost; the ratio's interval: "
            + ("the range over every pair of the two systems' seeds" if seeds > 1 else
               "every corner of the two twin intervals")
            + "; the emulated walks are its check (agreement), their own ratio beside it"
        )  # fmt: skip
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
