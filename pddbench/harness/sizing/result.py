"""The file form of a sizing search (``sizing.json``): every candidate measured, its
bounds and twin capacity, the binding resource, and the one chosen.

Owns :class:`SizedRow` and :class:`SizingResult` (written by the search, read back by the
main job and the tests) and the printed table. No search, no twin.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pddbench.harness.report.tables import Table, TCell

SIZING = "sizing.json"


class SizedRow(BaseModel):
    """One candidate: deployment, cost, the model's bound, the twin's capacity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deployment: str
    source: str  # "sized" (from the enumeration) or "built-in" (the scenario's own)
    cost: float
    bound_rps: float  # the compute model's bound (no queueing, no handoffs)
    bound_resource: str  # what binds in the model
    bound_detail: str = ""
    basis: str = "not run"  # the twin ladder's: capacity | load-bounded | refused
    capacity: float | None = None  # twin SLA goodput at capacity, req/s
    capacity_low: float | None = None
    capacity_high: float | None = None  # None: open above
    capacity_rps: float | None = None  # the planned offered rate at the capacity point
    binding: str = "unknown"  # measured at the lowest missed point
    binding_detail: str = ""
    wall_s: float = 0.0
    scenario: dict[str, object] = {}  # the candidate's scenario, as a scenario file holds it
    # the twin capacity at deployment seeds 0, 1, ... (empty: one seed); with several, the
    # row's capacity, interval and binding are the median seed's walk
    seed_capacities: list[float | None] = []

    @property
    def bcr(self) -> float | None:
        if self.basis != "capacity" or self.capacity is None or self.cost <= 0:
            return None
        return self.capacity / self.cost

    def capacity_text(self) -> str:
        if self.capacity is None:
            return self.basis
        lo = "-" if self.capacity_low is None else f"{self.capacity_low:.3g}"
        hi = "open" if self.capacity_high is None else f"{self.capacity_high:.3g}"
        tag = "" if self.basis == "capacity" else f" ({self.basis})"
        return f"{self.capacity:.3g} [{lo}, {hi}]{tag}"

    def seeds_text(self) -> str:
        """The capacity's range over the seeds (``-``: one seed, or none found one)."""
        got = [c for c in self.seed_capacities if c is not None]
        if len(self.seed_capacities) < 2 or not got:
            return "-"
        missing = len(self.seed_capacities) - len(got)
        tail = f" ({missing} of {len(self.seed_capacities)} none)" if missing else ""
        return f"{min(got):.3g}-{max(got):.3g}{tail}"


class SizingResult(BaseModel):
    """A system's sizing at one budget: the workload priced, the rows, the chosen one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    budget: float
    workload: str  # the per-request means the bounds priced
    priced: int  # candidates the model priced
    rows: list[SizedRow]
    chosen: int | None  # index into rows (None: no candidate reached a capacity)
    reason: str = ""
    wall_s: float = 0.0

    @property
    def chosen_row(self) -> SizedRow | None:
        return None if self.chosen is None else self.rows[self.chosen]

    def builtin_row(self) -> SizedRow | None:
        return next((r for r in self.rows if r.source == "built-in"), None)

    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / SIZING
        path.write_text(self.model_dump_json(indent=2))
        return path

    @property
    def seeds(self) -> int:
        """Deployment seeds each candidate was walked at."""
        return max((len(r.seed_capacities) for r in self.rows), default=0) or 1

    def table(self) -> Table:
        seeded = self.seeds > 1
        rows = []
        for i, r in enumerate(self.rows):
            bcr = r.bcr
            cells = [
                TCell(r.deployment + (" (built-in)" if r.source == "built-in" else "")),
                TCell(f"{r.cost:.4g}"),
                TCell(f"{r.bound_rps:.3g} ({r.bound_resource})"),
                TCell(r.capacity_text()),
            ]
            if seeded:
                cells.append(TCell(r.seeds_text()))
            cells += [
                TCell("-" if bcr is None else f"{bcr * 100:.3g}"),
                TCell(r.binding),
                TCell("CHOSEN" if i == self.chosen else ""),
            ]
            rows.append(tuple(cells))
        head = ["deployment", "cost", "model bound req/s (binds)", "twin capacity req/s [interval]"]
        if seeded:
            head.append(f"over {self.seeds} seeds min-max")
        head += ["BCR x100", "binding resource (measured)", ""]
        seeds_note = (
            f" Each candidate was walked at deployment seeds 0-{self.seeds - 1} (the servers' "
            "draws: MTP acceptance, tokens); its capacity, interval, BCR and binding are the "
            "median seed's walk, and the range beside it is what the seed alone moves."
            if seeded
            else ""
        )
        return Table(
            f"Sizing of {self.system} at {self.budget:g} A-eq. (VIRTUAL TIME)",
            tuple(head),
            tuple(rows),
            f"{self.priced} candidates priced by the compute model ({self.workload}); the "
            "best per structure were measured on the virtual-time twin's capacity ladder; "
            "chosen: the highest twin BCR (capacity / cost) among those that found a "
            "capacity. Twin capacity: SLA goodput where attainment crosses the target "
            "(interpolated in log rate; interval: bootstrap of the points' met counts). "
            "Binding resource: what the requests that missed the SLA at the "
            "lowest missed point spent their time on (TPOT misses: decode TPOT)." + seeds_note,
        )
