"""Twin against emulation on the same ladder point: the figures issue 27's bars compare.

Owns the figures of one ladder-point run folder, taken over the point's measured window
(requests intended in ``[warm-up, warm-up + measured)``, as the ladder measures them):
TTFT P50/P90/P99, TPOT P50/P99, E2E P99, SLA attainment (the point's own verdict), RLD's
share of output tokens, relayed requests, WAN bytes (KV, A -> B), the decode side's
(MD / D) prefix-cache hit rate, P's hit rate and the TTFT decomposition's means; the
tolerances the twin is held to (:data:`TOLERANCES`); and the side-by-side rows with a
verdict per figure: within the tolerance, within the twin's seed spread (the same twin at
other deployment seeds), or outside. Reads run folders only: must not run a replay,
choose a scenario or decide what a point is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from pddbench.harness.analysis.ttft_parts import PARTS
from pddbench.harness.rundir.folder import CAPACITY
from pddbench.harness.rundir.ladder import LadderPoint, LadderVerdict
from pddbench.harness.rundir.manifest import RunManifest


@dataclass(frozen=True)
class Tolerance:
    """How far the twin may sit from the emulated figure: ``rel`` (a fraction of the
    emulated value) or ``pp`` (percentage points)."""

    kind: str
    limit: float

    def within(self, emulated: float, virtual: float) -> bool:
        if math.isnan(emulated) or math.isnan(virtual):
            return math.isnan(emulated) and math.isnan(virtual)
        if self.kind == "pp":
            return abs(virtual - emulated) <= self.limit + 1e-9
        if emulated == 0:
            return virtual == 0
        return abs(virtual / emulated - 1) <= self.limit + 1e-9

    def describe(self) -> str:
        return f"±{self.limit:g} pp" if self.kind == "pp" else f"±{self.limit * 100:g} %"


# Issue 27's bars at the main job's first rung.
TOLERANCES: dict[str, Tolerance] = {
    "TTFT P50 s": Tolerance("rel", 0.15),
    "TTFT P90 s": Tolerance("rel", 0.15),
    "TTFT P99 s": Tolerance("rel", 0.25),
    "TPOT P50 ms": Tolerance("rel", 0.10),
    "TPOT P99 ms": Tolerance("rel", 0.10),
    "SLA attainment %": Tolerance("pp", 2.0),
    "RLD share %": Tolerance("pp", 2.0),
    "WAN GB": Tolerance("rel", 0.05),
}


@dataclass(frozen=True)
class PointRun:
    """One ladder point's run folder: its records in the measured window and its verdict."""

    folder: Path
    system: str
    backend: str
    index: int
    trace_start_s: float
    load_scale: float
    records: pd.DataFrame  # the measured window's records (every status)
    attainment: float | None  # the point's SLA attainment (0-1), as the ladder judged it
    excluded: str | None = None  # why the ladder excluded the point (the emulator fell behind)
    point_s: float = 0.0  # the measured window's length (trace seconds after the warm-up)

    @property
    def key(self) -> tuple[int, float, float, float]:
        """The point's identity across backends: its index, trace window (start, length)
        and load scale. Two walks' points with one index differ in load, or in the window's
        length, once the walks part: such points are not the same run."""
        return (
            self.index,
            round(self.trace_start_s, 3),
            round(self.point_s, 3),
            round(self.load_scale, 4),
        )


def ladder_point(folder: Path, system: str, index: int, trace_start_s: float) -> LadderPoint | None:
    """The ladder's verdict on one point: the entry with the point's index and window in a
    ``capacity.json`` of ``system``'s walk, the point folder's own or a sibling folder's
    (the emulated walk copies the whole walk's verdict into each point's folder; the twin's
    walks write it only in the ladder's folder). None: no walk judged this point."""
    found = [folder / CAPACITY, *sorted(folder.parent.glob(f"*/{CAPACITY}"))]
    for path in dict.fromkeys(found):
        if not path.is_file():
            continue
        try:
            verdict = LadderVerdict.model_validate_json(path.read_text())
        except (OSError, ValidationError):
            continue
        if verdict.system != system:
            continue
        for p in verdict.points:
            if p.index == index and math.isclose(p.trace_start_s, trace_start_s, abs_tol=1e-3):
                return p
    return None


def load_point(folder: Path) -> PointRun:
    """A ladder point's run folder (``manifest.json`` with a ladder point and its records);
    its attainment is the ladder's verdict on it (:func:`ladder_point`)."""
    manifest = RunManifest.load(folder)
    point = manifest.ladder_point
    if point is None:
        raise ValueError(f"{folder} is not a ladder point's run folder")
    df = pd.read_parquet(folder / "requests.parquet")
    start, end = point.warmup_s, point.warmup_s + point.point_s
    window = df[(df.intended_send_s >= start) & (df.intended_send_s < end)]
    judged = ladder_point(folder, manifest.scenario_name, point.index, point.trace_start_s)
    backend = manifest.replay.backend if manifest.replay is not None else "emulated"
    return PointRun(
        folder,
        manifest.scenario_name,
        str(backend or "emulated"),
        point.index,
        point.trace_start_s,
        float(manifest.load_scale or 0.0),
        window.reset_index(drop=True),
        judged.attainment if judged is not None else None,
        judged.excluded if judged is not None and judged.excluded else None,
        point.point_s,
    )


def point_folders(root: Path) -> list[Path]:
    """Every ladder point's run folder under ``root`` (a capacity ``--out`` folder, or one
    point's folder), in name order."""
    if (root / "manifest.json").exists():
        return [root]
    out = []
    for m in sorted(root.rglob("manifest.json")):
        if (m.parent / "requests.parquet").exists():
            out.append(m.parent)
    return out


def _decode_hit(stories: pd.Series) -> float:
    cached = prompt = 0
    for text in stories.dropna():
        story: dict[str, Any] = json.loads(text)
        sides = story.get("decode_side") or {}
        if not sides:
            continue
        # the decoder that took the request's prompt KV: MD, else D (RLD's hit is not asked)
        side = sides.get("MD") or sides.get("D") or next(iter(sides.values()))
        cached += int(side.get("cached") or 0)
        prompt += int(story.get("prompt_tokens") or 0)
    return 100 * cached / prompt if prompt else float("nan")


def figures(run: PointRun) -> dict[str, float]:
    """The compared figures of one point (ok requests of its measured window)."""
    ok = run.records[run.records.status == "ok"]
    nan = float("nan")

    def pct(col: pd.Series, q: float, scale: float = 1.0) -> float:
        v = col.dropna().to_numpy(dtype=float)
        return float(np.percentile(v, q) * scale) if v.size else nan

    out = {f"TTFT P{q} s": pct(ok.ttft_s, q) for q in (50, 90, 99)}
    out |= {f"TPOT P{q} ms": pct(ok.tpot_s, q, 1e3) for q in (50, 99)}
    out["E2E P99 s"] = pct(ok.e2e_s, 99)
    out["SLA attainment %"] = 100 * run.attainment if run.attainment is not None else nan
    tokens = float(ok.output_tokens.sum())
    relay = float(ok.relay_tokens.fillna(0).sum())
    out["RLD share %"] = 100 * relay / tokens if tokens else nan
    out["relayed"] = float((ok.pipeline == "P->RLD->MD").sum())
    out["WAN GB"] = float(ok.wan_bytes.fillna(0).sum() / 1e9)
    out["MD/D hit %"] = _decode_hit(ok.server_timing)
    inputs = float(ok.input_tokens.sum())
    out["P hit %"] = 100 * float(ok.cached_tokens_reported.sum()) / inputs if inputs else nan
    for p in PARTS:
        col = f"ttft_{p}_s"
        out[f"{p} mean ms"] = float(ok[col].mean() * 1e3) if col in ok else nan
    out["ok requests"] = float(len(ok))
    out["errors"] = float((run.records.status == "error").sum())
    return out


@dataclass(frozen=True)
class CheckRow:
    figure: str
    emulated: float
    virtual: float
    tolerance: Tolerance | None
    uncalibrated: float | None = None  # the twin of the hardware (no fitted links or hosts)
    # the figure's range over the twin's seed ensemble (the twin at its seed and at others):
    # what the same deployment gives when only the servers' draws change
    spread: tuple[float, float] | None = None

    @property
    def ratio(self) -> float:
        if self.emulated == 0 or math.isnan(self.emulated):
            return float("nan")
        return self.virtual / self.emulated

    @property
    def missing(self) -> bool:
        """One side has no figure (nan: no ok request, or no ladder verdict on the point)."""
        return math.isnan(self.emulated) != math.isnan(self.virtual)

    @property
    def within(self) -> bool | None:
        if self.tolerance is None or self.missing:
            return None
        return self.tolerance.within(self.emulated, self.virtual)

    @property
    def in_spread(self) -> bool | None:
        """Whether the emulated figure lies within the twin's seed spread, each end widened
        by the tolerance (None without a tolerance or an ensemble)."""
        if self.tolerance is None or self.spread is None:
            return None
        lo, hi = self.spread
        if math.isnan(self.emulated) or math.isnan(lo) or math.isnan(hi):
            return self.tolerance.within(self.emulated, lo)
        if lo <= self.emulated <= hi:
            return True
        return self.tolerance.within(self.emulated, lo) or self.tolerance.within(self.emulated, hi)

    @property
    def verdict(self) -> str:
        """``ok`` (the twin within the tolerance), ``in spread`` (outside it, but the emulated
        figure lies within the twin's seed spread: the figure moves that much when only the
        servers' draws change, so one run of each backend cannot tell them apart),
        ``OUTSIDE``, ``n/a`` (one side has no figure: nothing to judge), or empty (no
        tolerance)."""
        if self.tolerance is not None and self.missing:
            return "n/a"
        if self.within is None:
            return ""
        if self.within:
            return "ok"
        return "in spread" if self.in_spread else "OUTSIDE"


def rows(
    emulated: dict[str, float],
    virtual: dict[str, float],
    uncalibrated: dict[str, float] | None = None,
    seeds: list[dict[str, float]] | None = None,
) -> list[CheckRow]:
    """Figures side by side; ``seeds``: the same twin at other deployment seeds (the spread
    is taken over them and ``virtual``)."""
    u = uncalibrated or {}
    out = []
    for k, e in emulated.items():
        spread = None
        if seeds:
            vals = [v for v in (virtual[k], *(s[k] for s in seeds)) if not math.isnan(v)]
            spread = (min(vals), max(vals)) if vals else (math.nan, math.nan)
        out.append(CheckRow(k, e, virtual[k], TOLERANCES.get(k), u.get(k), spread))
    return out


def compare(
    emulated: PointRun,
    virtual: PointRun,
    uncalibrated: PointRun | None = None,
    seeds: list[PointRun] | None = None,
) -> list[CheckRow]:
    """The points' figures side by side (the same window of the same trace): the emulated
    run, the twin it is judged against, (optionally) the twin without calibration, and the
    twin's seed ensemble (the same twin at other deployment seeds)."""
    u = figures(uncalibrated) if uncalibrated is not None else None
    s = [figures(p) for p in seeds] if seeds else None
    return rows(figures(emulated), figures(virtual), u, s)


def render(rows: list[CheckRow]) -> str:
    """A fixed-width table: figure, emulated, virtual, v/e, tolerance, verdict (the
    uncalibrated twin's figure and the twin's seed spread, when there are)."""
    extra = any(r.uncalibrated is not None for r in rows)
    seeded = any(r.spread is not None for r in rows)
    head = f"{'figure':24} {'emulated':>11} {'virtual':>11} {'v/e':>6}  {'bar':>8}  {'':9}"
    if seeded:
        head += f" {'twin seeds min-max':>21}"
    lines = [head + (f" {'uncalibrated':>12}" if extra else "")]
    for r in rows:
        bar = r.tolerance.describe() if r.tolerance is not None else ""
        ratio = f"{r.ratio:6.2f}" if not math.isnan(r.ratio) else "     -"
        line = f"{r.figure:24} {r.emulated:11.4g} {r.virtual:11.4g} {ratio}  {bar:>8}"
        line += f"  {r.verdict:9}"
        if seeded:
            line += f" {r.spread[0]:10.4g}-{r.spread[1]:<10.4g}" if r.spread else " " * 22
        if extra:
            line += f" {r.uncalibrated:12.4g}" if r.uncalibrated is not None else ""
        lines.append(line.rstrip())
    return "\n".join(lines)
