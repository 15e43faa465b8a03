"""The file form of the main job's verdict (``main_verdict.json``): each system at its best
equal-cost deployment, its capacity on the twin and in emulation, its BCR against the
baseline, and the resource that binds it.

Owns :class:`SystemVerdict`, :class:`MainVerdict`, the verdict sentence the report opens
with (:meth:`MainVerdict.sentence`), and the way across the disk boundary
(:meth:`MainVerdict.save` into a run folder, :func:`read_main_verdict`). The main job
(:mod:`pddbench.harness.jobs.main_job`) fills them; the reports read them through
:mod:`pddbench.harness.analysis.rundir`. Decides nothing: figures arrive computed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from pddbench.errors import UserError, first_problem

MAIN_VERDICT = "main_verdict.json"

Agreement = Literal["agree", "disagree", "unknown"]
BcrSource = Literal["twin", "emulated"]  # whose capacity a row's BCR is
Source = Literal["sized", "built-in"]


def _pct(x: float) -> str:
    return f"{(x - 1.0) * 100:+.0f} %"


def _ratio(value: float | None, low: float | None, high: float | None) -> str:
    """A BCR ratio as a percentage difference with its interval (``-``: none)."""
    if value is None:
        return "-"
    lo = "?" if low is None else _pct(low)
    hi = "open" if high is None else _pct(high)
    return f"{_pct(value)} [{lo}, {hi}]"


def _interval(value: float, low: float | None, high: float | None) -> str:
    """``value [low, high]`` in req/s (``-``: no lower bound, ``open``: none above)."""
    lo = "-" if low is None else f"{low:.3g}"
    hi = "open" if high is None else f"{high:.3g}"
    return f"{value:.3g} [{lo}, {hi}]"


def _with_seeds(text: str, seeds: list[float | None]) -> str:
    """``text`` and, over several seeds, their capacities' range."""
    got = [c for c in seeds if c is not None]
    if len(seeds) > 1 and got:
        text += f"; {len(seeds)} seeds {min(got):.3g}-{max(got):.3g}"
    return text


class SystemVerdict(BaseModel):
    """One system's row of the verdict (the report JSON's ``main_verdict.systems``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str  # the scenario's name
    deployment: str  # e.g. "P 3 x 20 h800-sxm + D 2 x 14 h800-sxm"
    source: Source  # chosen by the sizing search, or the scenario's own split
    cost: float  # in the budget's currency
    cost_text: str = ""
    twin_capacity: float | None = None  # req/s meeting the SLA, virtual time
    twin_low: float | None = None
    twin_high: float | None = None  # None: open above
    # the twin's capacity at deployment seeds 0, 1, ... (empty: one seed); with several,
    # twin_capacity and its interval are the median seed's walk
    twin_seeds: list[float | None] = []
    # the check's twin: the emulated deployment's (the hardware's plus this host's per-hop
    # costs, host_s a request, fitted on the emulated walk's first point); None: unfitted
    check_capacity: float | None = None
    check_seeds: list[float | None] = []
    host_s: float | None = None
    emulated_basis: str = "not run"  # capacity | load-bounded | refused | failed | not run
    emulated_capacity: float | None = None  # req/s meeting the SLA, emulated
    emulated_low: float | None = None
    emulated_high: float | None = None  # None: open above
    # the check's twin (else the twin) capacity, its seed range, vs the emulated interval
    agreement: Agreement = "unknown"
    agreement_text: str = ""
    # the verdict's BCR: capacity goodput / cost, the twin's capacity (``bcr_source``
    # "twin", checked by the emulated walk) or the walk's ("emulated": no twin, or the run
    # is itself on the twin)
    bcr: float | None = None
    bcr_source: BcrSource = "emulated"
    bcr_ratio: float | None = None  # BCR / the baseline's BCR (1.0: equal)
    bcr_ratio_low: float | None = None
    bcr_ratio_high: float | None = None
    # the emulated walk's own: its capacity / cost and the ratio to the baseline's
    emulated_bcr: float | None = None
    emulated_ratio: float | None = None
    emulated_ratio_low: float | None = None
    emulated_ratio_high: float | None = None
    binding: str = "unknown"  # prefill | decode TPOT | WAN | relay KV room | memory | ...
    binding_detail: str = ""
    reason: str = ""  # why a figure is missing

    def capacity_text(self) -> str:
        """The emulated capacity with its interval, or its basis when there is none."""
        if self.emulated_capacity is None:
            return self.emulated_basis + (f": {self.reason}" if self.reason else "")
        label = "" if self.emulated_basis == "capacity" else f" ({self.emulated_basis})"
        return _interval(self.emulated_capacity, self.emulated_low, self.emulated_high) + label

    def twin_text(self) -> str:
        """The twin's capacity with its interval and, over several seeds, their range ("-"
        when the twin gave none)."""
        if self.twin_capacity is None:
            return "-"
        return _with_seeds(_interval(self.twin_capacity, self.twin_low, self.twin_high),
                           self.twin_seeds)  # fmt: skip

    def check_twin_text(self) -> str:
        """The check's twin capacity and, over several seeds, their range ("-": none)."""
        if self.check_capacity is None:
            return "-"
        return _with_seeds(f"{self.check_capacity:.3g}", self.check_seeds)

    def ratio_text(self) -> str:
        """The BCR ratio to the baseline as a percentage difference with its interval."""
        return _ratio(self.bcr_ratio, self.bcr_ratio_low, self.bcr_ratio_high)

    def emulated_ratio_text(self) -> str:
        """The emulated walks' BCR ratio to the baseline's, with its interval."""
        return _ratio(self.emulated_ratio, self.emulated_ratio_low, self.emulated_ratio_high)

    def check_text(self) -> str:
        """What the emulated check says of a twin-sourced BCR (empty for an emulated one)."""
        if self.bcr_source != "twin":
            return ""
        if self.agreement == "agree":
            return "emulated check: agrees"
        if self.agreement == "disagree":
            return f"emulated check: DISAGREES ({self.agreement_text})"
        if self.emulated_basis == "capacity":  # a capacity whose interval bounds nothing
            return "emulated check: none (its interval bounds nothing)"
        return f"emulated check: none ({self.emulated_basis})"


class MainVerdict(BaseModel):
    """The main job's verdict: every system at ``budget``, one SLA, one emulation scale."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget: float  # the equal cost every system is sized to (the baseline's)
    currency: str = "A-equivalent"
    baseline: str  # the system the BCR ratios are against
    sla_text: str  # e.g. "TTFT <= 5 s, TPOT <= 30 ms, 99 % of requests"
    emulation: str = ""  # e.g. "emulated WAN, scale 1/100 for every system"
    quick: bool = False  # --quick: wider intervals traded for time
    wall_s: float | None = None
    systems: list[SystemVerdict]
    notes: list[str] = []  # labels the page must carry (a disagreement, a refused system)

    def row(self, system: str) -> SystemVerdict | None:
        return next((s for s in self.systems if s.system == system), None)

    def sentence(self) -> str:
        """The verdict in words, the first thing the report says."""
        base = self.row(self.baseline)
        head = f"At equal cost ({self.budget:g} A-eq.) and one SLA ({self.sla_text})"
        parts = []
        for s in self.systems:
            if s.system == self.baseline:
                continue
            if s.bcr_ratio is None:
                parts.append(
                    f"{s.system} has no BCR against {self.baseline} "
                    f"({s.reason or s.emulated_basis})"
                )
                continue
            check = s.check_text()
            parts.append(
                f"{s.system} delivers {s.ratio_text()} goodput per unit "
                f"cost against {self.baseline}, bound by {s.binding}"
                + (f" ({check})" if check else "")
            )
        if not parts:
            return f"{head}: no system could be compared with {self.baseline}."
        twin = [s for s in self.systems if s.bcr_source == "twin" and s.bcr is not None]
        if twin:
            seeds = max(len(s.twin_seeds) for s in twin)
            head += (
                ", on the virtual-time twin"
                + (f" (the median of {seeds} deployment seeds, the range over them)"
                   if seeds > 1 else "")
                + " checked by the real-time run"
                + (f" ({self.emulation})" if self.emulation else "")
            )  # fmt: skip
        tail = ""
        if base is not None:
            check = base.check_text()
            tail = f" ({self.baseline}: bound by {base.binding}" + (f"; {check})" if check else ")")
        return f"{head}, " + "; ".join(parts) + tail + "."

    def save(self, folder: str | Path) -> Path:
        """Write ``<folder>/main_verdict.json``; its path."""
        path = Path(folder) / MAIN_VERDICT
        path.write_text(self.model_dump_json(indent=2))
        return path


def read_main_verdict(path: Path) -> MainVerdict | None:
    """The main verdict in ``path`` (None: no such file); :class:`UserError` naming the
    file when it is unreadable."""
    if not path.exists():
        return None
    try:
        return MainVerdict.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except ValidationError as exc:
        loc, msg = first_problem(exc)
        raise UserError(f"{path}: {loc}: {msg}") from None
