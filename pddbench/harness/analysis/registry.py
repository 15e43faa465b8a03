"""The metrics registry: what a metric declares, how metrics are found, ordered and computed.

A metric is one small class that declares its tag, header, unit and display unit, which
records it applies to, its direction (is lower or higher better), the metrics it needs,
and what NaN means for it; :func:`declare` builds such a class from one row of
declarations (the table in ``analysis/metrics/catalog.py``). Two kinds exist:

* :class:`DistributionMetric` — one value per request (or per session); summarised as
  count, mean, min, max and the configured percentiles (``ttft.p99``).
* :class:`ScalarMetric` — one number per run or group (``goodput``), possibly computed
  from the results of the metrics it requires.

:class:`MetricRegistry` discovers concrete metric classes in a package, rejects duplicate
tags and unknown dependencies, orders metrics so that dependencies come first, and
computes them over a :class:`RecordSet`. Every consumer (reports, goodput, regression
checks) reads metrics through a :class:`MetricSet` with keys ``tag`` or ``tag.stat``.
This module owns no metric itself.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import ModuleType
from typing import ClassVar

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.stats import DEFAULT_PERCENTILES, Distribution, describe
from pddbench.harness.analysis.units import Unit, factor
from pddbench.harness.config.cost import CostModel
from pddbench.harness.config.sla import DEFAULT_SLA, SLA


class Kind(StrEnum):
    DISTRIBUTION = "distribution"
    SCALAR = "scalar"


class Direction(StrEnum):
    LOWER = "lower"  # lower is better (latency, errors)
    HIGHER = "higher"  # higher is better (goodput, attainment)
    NONE = "none"  # neither (counts, fidelity ratios)


class Applies(StrEnum):
    """Which records a metric is computed over."""

    ALL = "all"  # every record, whatever its status
    SENT = "sent"  # records that were sent (actual_send_s set)
    OK = "ok"  # status ok
    OK_RELAYED = "ok-relayed"  # status ok and relayed through RLD
    OK_DIRECT = "ok-direct"  # status ok and not relayed

    def mask(self, records: RecordSet) -> np.ndarray | None:
        if self is Applies.ALL:
            return None
        if self is Applies.SENT:
            return records.sent
        if self is Applies.OK:
            return records.ok
        if self is Applies.OK_RELAYED:
            return records.ok & records.relayed
        return records.ok & ~records.relayed


@dataclass(frozen=True)
class Context:
    """What a metric computation needs beyond the records."""

    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    sla: SLA = DEFAULT_SLA
    cost: CostModel | None = None
    duration_s: float | None = None  # the run window; None = the records' own window

    def window_s(self, records: RecordSet) -> float:
        """Seconds from the first intended send to the last end (NaN when undefined)."""
        d = records.duration_s if self.duration_s is None else self.duration_s
        return d if d > 0 else math.nan


class Metric:
    """Declarations shared by every metric; subclass a kind, not this."""

    tag: ClassVar[str]
    header: ClassVar[str]
    unit: ClassVar[Unit]
    display_unit: ClassVar[Unit | None] = None  # None: same as unit
    applies_to: ClassVar[Applies] = Applies.ALL
    direction: ClassVar[Direction] = Direction.NONE
    requires: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    nan_means: ClassVar[str] = "no applicable records"
    min_change: ClassVar[float] = 0.0  # smallest change (base unit) a regression check trusts
    kind: ClassVar[Kind]

    @property
    def shown_in(self) -> Unit:
        return self.display_unit or self.unit

    @property
    def scale(self) -> float:
        return factor(self.unit, self.shown_in)


class DistributionMetric(Metric):
    """A per-request (or per-session) quantity, summarised by count, mean and percentiles."""

    kind: ClassVar[Kind] = Kind.DISTRIBUTION
    column: ClassVar[str | None] = None  # a records column read as is; else override values()

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        if self.column is None:
            raise NotImplementedError
        return records.col(self.column)


class ScalarMetric(Metric):
    """One number for a run or a group of its records."""

    kind: ClassVar[Kind] = Kind.SCALAR

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        raise NotImplementedError


@dataclass(frozen=True)
class MetricResult:
    """A computed metric, in its base unit, with the declarations needed to show it."""

    tag: str
    header: str
    kind: Kind
    unit: Unit
    display_unit: Unit
    direction: Direction
    value: float  # scalar value, or the mean of a distribution
    dist: Distribution | None = None

    @classmethod
    def of(cls, metric: Metric, value: float, dist: Distribution | None = None) -> MetricResult:
        """The result of ``metric``, with its declarations."""
        m = metric
        return cls(m.tag, m.header, m.kind, m.unit, m.shown_in, m.direction, value, dist)

    def get(self, stat: str | None = None) -> float:
        """A statistic in the base unit (``None``: the scalar value / the mean)."""
        if stat is None:
            return self.value
        if self.dist is None:
            raise KeyError(f"{self.tag} is a scalar metric and has no statistic {stat!r}")
        return self.dist.get(stat)

    def shown(self, stat: str | None = None) -> float:
        """A statistic in the display unit (counts are never scaled)."""
        v = self.get(stat)
        return v if stat == "count" else v * factor(self.unit, self.display_unit)


@dataclass
class MetricSet:
    """Computed metrics by tag; keys are ``tag`` or ``tag.stat`` (``ttft.p99``)."""

    results: dict[str, MetricResult] = field(default_factory=dict)

    def __getitem__(self, tag: str) -> MetricResult:
        return self.results[tag]

    def __contains__(self, tag: object) -> bool:
        return tag in self.results

    def __iter__(self) -> Iterator[MetricResult]:
        return iter(self.results.values())

    def value(self, key: str) -> float:
        """The value of ``tag`` or ``tag.stat`` in base units (KeyError if unknown)."""
        tag, _, stat = key.partition(".")
        return self.results[tag].get(stat or None)

    def shown(self, key: str) -> float:
        tag, _, stat = key.partition(".")
        return self.results[tag].shown(stat or None)


def split_key(key: str) -> tuple[str, str | None]:
    tag, _, stat = key.partition(".")
    return tag, (stat or None)


Values = Callable[[RecordSet, Context], np.ndarray]
Compute = Callable[[RecordSet, Context, Mapping[str, MetricResult]], float]


def declare(
    tag: str,
    header: str,
    unit: Unit,
    shown: Unit | None = None,
    *,
    applies: Applies = Applies.ALL,
    better: Direction = Direction.NONE,
    requires: tuple[str, ...] = (),
    min_change: float = 0.0,
    what: str,
    nan: str,
    values: str | Values | None = None,
    compute: Compute | None = None,
) -> type[Metric]:
    """A metric class from one row of declarations.

    ``values`` (a records column, or a function of the records) makes a
    :class:`DistributionMetric`; ``compute`` makes a :class:`ScalarMetric`. ``shown`` is
    the display unit, ``what`` the description and ``nan`` what NaN means.
    """
    if (values is None) == (compute is None):
        raise ValueError(f"{tag}: declare exactly one of values= and compute=")
    attrs: dict[str, object] = {
        "tag": tag,
        "header": header,
        "unit": unit,
        "display_unit": shown,
        "applies_to": applies,
        "direction": better,
        "requires": requires,
        "description": what,
        "nan_means": nan,
        "min_change": min_change,
    }
    base: type[Metric] = DistributionMetric
    if compute is not None:
        base, attrs["compute"] = ScalarMetric, _method(compute)
    elif isinstance(values, str):
        attrs["column"] = values
    else:
        attrs["values"] = _method(values)
    name = "".join(part.capitalize() for part in tag.split("_"))
    return type(name, (base,), attrs)


def _method(fn: Callable[..., object]) -> Callable[..., object]:
    """``fn`` as a method that ignores the metric instance."""
    return lambda self, *args: fn(*args)


class MetricRegistry:
    """Metric instances by tag, in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def register(self, cls: type[Metric]) -> type[Metric]:
        """Add a metric class (usable as a decorator); a duplicate tag is an error."""
        tag = getattr(cls, "tag", None)
        if not isinstance(tag, str) or not tag or "." in tag:
            raise ValueError(f"{cls.__name__}: tag must be a non-empty string without '.'")
        if tag in self._metrics:
            other = type(self._metrics[tag]).__name__
            raise ValueError(f"duplicate metric tag {tag!r}: {cls.__name__} and {other}")
        self._metrics[tag] = cls()
        return cls

    def discover(self, package: ModuleType) -> MetricRegistry:
        """Register what the modules of ``package`` declare: the rows of a module's
        ``METRICS`` table, then the concrete metric classes the module defines."""
        modules = [package] + [
            importlib.import_module(f"{package.__name__}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)
        ]
        for module in modules:
            for cls in getattr(module, "METRICS", ()):
                self.register(cls)
            for obj in list(vars(module).values()):  # definition order
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, DistributionMetric | ScalarMetric)
                    and obj.__module__ == module.__name__
                    and "tag" in obj.__dict__
                ):
                    self.register(obj)
        self.ordered()  # fail now on unknown dependencies or cycles
        return self

    def __contains__(self, tag: object) -> bool:
        return tag in self._metrics

    def __getitem__(self, tag: str) -> Metric:
        try:
            return self._metrics[tag]
        except KeyError:
            raise KeyError(f"unknown metric {tag!r}") from None

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._metrics.values())

    def tags(self) -> tuple[str, ...]:
        return tuple(self._metrics)

    def ordered(self, tags: Iterable[str] | None = None) -> list[Metric]:
        """Metrics (the given tags and everything they need) with dependencies first."""
        wanted = list(self._metrics) if tags is None else list(tags)
        order: list[Metric] = []
        state: dict[str, int] = {}  # 1 = visiting, 2 = done

        def visit(tag: str, chain: tuple[str, ...]) -> None:
            if state.get(tag) == 2:
                return
            if state.get(tag) == 1:
                raise ValueError(f"metric dependency cycle: {' -> '.join((*chain, tag))}")
            if tag not in self._metrics:
                who = f" (required by {chain[-1]})" if chain else ""
                raise KeyError(f"unknown metric {tag!r}{who}")
            state[tag] = 1
            for dep in self._metrics[tag].requires:
                visit(dep, (*chain, tag))
            state[tag] = 2
            order.append(self._metrics[tag])

        for tag in wanted:
            visit(tag, ())
        return order

    def compute(
        self, records: RecordSet, ctx: Context | None = None, tags: Iterable[str] | None = None
    ) -> MetricSet:
        """Compute the metrics (and their dependencies) over ``records``."""
        ctx = ctx or Context()
        if ctx.duration_s is None:  # subsets (ok-only, relayed-only) keep the run's window
            ctx = replace(ctx, duration_s=records.duration_s)
        out = MetricSet()
        subsets: dict[Applies, RecordSet] = {}
        for metric in self.ordered(tags):
            applies = metric.applies_to
            if applies not in subsets:
                mask = applies.mask(records)
                subsets[applies] = records if mask is None else records.subset(mask)
            rows = subsets[applies]
            if isinstance(metric, DistributionMetric):
                dist = describe(metric.values(rows, ctx), ctx.percentiles)
                value = dist.mean
            else:
                assert isinstance(metric, ScalarMetric)
                dist = None
                value = float(metric.compute(rows, ctx, out.results))
            out.results[metric.tag] = MetricResult.of(metric, value, dist)
        return out


_DEFAULT: MetricRegistry | None = None


def default_registry() -> MetricRegistry:
    """The registry of every metric in ``pddbench.harness.analysis.metrics``."""
    global _DEFAULT
    if _DEFAULT is None:
        from pddbench.harness.analysis import metrics

        _DEFAULT = MetricRegistry().discover(metrics)
    return _DEFAULT
