"""What an experiment *is*: its declaration, its measurement and its verdict.

Owns the three models every other module of ``experiments`` speaks:

* :class:`Experiment` — one declared recipe of PDD.md's E1–E12 table (workload,
  scenarios, what is swept, which metrics, the published figure in PDD.md's words, the
  shape check, the declared cost);
* :class:`Measurement` — what one run of an experiment measured (values with intervals,
  the series behind its figure, the run folders it came from, its labels), written to
  and read from ``<out>/<id>/measurement.json`` by this same class;
* :class:`Verdict` — *reproduced in shape*, *not reproduced*, *inconclusive* (the shape
  was measured where the experiment's mechanism was not: WAN not emulated) or *not run*.

Sans-IO except :meth:`Measurement.save` / :meth:`Measurement.load`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MEASUREMENT_FILE = "measurement.json"


class Verdict(StrEnum):
    REPRODUCED = "reproduced in shape"
    NOT_REPRODUCED = "not reproduced"
    INCONCLUSIVE = "inconclusive"
    NOT_RUN = "not run"


class Value(BaseModel):
    """One measured figure, with a 95 % interval where it is a statistic (NaN: undefined)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")  # NaN stays NaN through the file

    name: str
    value: float
    unit: str = ""
    low: float | None = None
    high: float | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _null_is_nan(cls, v: object) -> object:  # files written before NaN was kept
        return math.nan if v is None else v

    def text(self) -> str:
        v = _num(self.value)
        if self.low is not None and self.high is not None:
            v += f" [{_num(self.low)}, {_num(self.high)}]"
        return f"{self.name} = {v}{(' ' + self.unit) if self.unit else ''}"


def _num(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


class Series(BaseModel):
    """One line of the figure behind a row: x against y, with axis names."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    label: str
    x: list[float]
    y: list[float]
    x_name: str = "x"
    y_name: str = "y"
    log_y: bool = False  # the figure's panel plots y on a log scale (values span decades)


class Measurement(BaseModel):
    """What one run of one experiment measured (or why it measured nothing)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    experiment: str
    quick: bool
    values: list[Value] = Field(default_factory=list)
    series: list[Series] = Field(default_factory=list)
    runs: list[str] = Field(default_factory=list)  # run folders, relative to the out dir
    labels: list[str] = Field(default_factory=list)  # e.g. "WAN not emulated"
    wan_emulated: bool | None = None  # None: the experiment crosses no emulated link
    not_run: str | None = None  # the reason, when nothing was measured
    elapsed_s: float = 0.0
    notes: list[str] = Field(default_factory=list)
    # named words beside the values (E10: the binding resource read per ladder)
    facts: dict[str, str] = Field(default_factory=dict)

    def value(self, name: str) -> Value:
        for v in self.values:
            if v.name == name:
                return v
        raise KeyError(f"{self.experiment}: no measured value {name!r}")

    def get(self, name: str) -> float:
        return self.value(name).value

    def line(self, label: str) -> Series:
        for s in self.series:
            if s.label == label:
                return s
        raise KeyError(f"{self.experiment}: no series {label!r}")

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / MEASUREMENT_FILE
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, folder: Path) -> Measurement:
        return cls.model_validate_json((folder / MEASUREMENT_FILE).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class CheckResult:
    """The outcome of a shape check: passed or not, what was seen, and by how much it missed."""

    passed: bool
    seen: str
    gap: str = ""  # how far from the published shape, when not passed


@dataclass(frozen=True)
class Cost:
    """Declared wall time on the reference 2-core machine, in seconds (replays not included)."""

    quick_s: float
    full_s: float

    def of(self, quick: bool) -> float:
        return self.quick_s if quick else self.full_s


Runner = Callable[["Experiment", "RunContext"], Measurement]


@dataclass(frozen=True)
class RunContext:
    """Where and how an experiment runs (filled in by the CLI)."""

    out: Path  # this experiment's folder
    quick: bool
    emulate: bool = False  # replays: emulate the WAN (needs namespaces) or --no-emulation
    trace: Path | None = None  # trace experiments: the user's trace instead of jan-feb
    progress: Callable[[str], None] = lambda _msg: None


@dataclass(frozen=True)
class Experiment:
    """One declared experiment of PDD.md's table."""

    id: str  # "E1" .. "E12"
    title: str  # PDD.md's "experiment" column
    expected: str  # PDD.md's "expected" column, verbatim
    published: str  # the published figure(s), in PDD.md's words
    workload: str
    scenarios: tuple[str, ...]
    sweep: str  # what is swept ("" when nothing)
    metrics: tuple[str, ...]  # measured value names (and registry tags they come from)
    check: Callable[[Measurement], CheckResult]
    check_text: str  # the shape check in words
    cost: Cost
    run: Runner | None  # None: not runnable here, see not_run_reason
    needs_wan: bool = False  # its mechanism is the WAN: without emulation never "reproduced"
    replayed: bool = False  # its scenarios are replayed (runs shared within one out folder)
    not_run_reason: str = ""
    figure: str = ""  # which series the figure plots
    notes: tuple[str, ...] = field(default=())
    # swept values per dimension (a WAN sweep: link field -> values), full and --quick
    points: dict[str, tuple[float, ...]] = field(default_factory=dict)
    quick_points: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def sweep_points(self, quick: bool) -> dict[str, tuple[float, ...]]:
        """The declared points of this run (--quick: ``quick_points`` where declared)."""
        return dict(self.quick_points or self.points) if quick else dict(self.points)

    def measured(self, ctx: RunContext, values: list[Value], **fields: Any) -> Measurement:
        """This experiment's :class:`Measurement` in ``ctx`` (its id and mode filled in)."""
        return Measurement(experiment=self.id, quick=ctx.quick, values=values, **fields)

    def judge(self, m: Measurement) -> tuple[Verdict, CheckResult | None]:
        """The verdict on a measurement (pure)."""
        if m.not_run is not None:
            return Verdict.NOT_RUN, None
        try:
            result = self.check(m)
        except KeyError as exc:  # an older or partial measurement: say what it lacks
            return Verdict.NOT_RUN, CheckResult(False, "", f"measurement incomplete: {exc}")
        if self.needs_wan and not m.wan_emulated:
            return Verdict.INCONCLUSIVE, result
        return (Verdict.REPRODUCED if result.passed else Verdict.NOT_REPRODUCED), result
