"""A small Prometheus text-format registry for the reference servers.

Owns counters, gauges (set or read from a callback) and histograms with labels, and their
exposition in the Prometheus text format 0.0.4 (``GET /metrics``). Every series of one
registry carries the same constant labels (``instance``, ``role``). No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_esc(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = labelnames

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        if not labelnames:
            self.values[()] = 0.0

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        for lv, v in self.values.items():
            yield self.name, tuple(zip(self.labelnames, lv, strict=True)), v


class Gauge(_Metric):
    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_text: str,
        fn: Callable[[], float] | None = None,
        labelnames: tuple[str, ...] = (),
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.fn = fn
        self.values: dict[tuple[str, ...], float] = {}

    def set(self, value: float, *labels: str) -> None:
        self.values[labels] = value

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        if self.fn is not None:
            yield self.name, (), float(self.fn())
        for lv, v in self.values.items():
            yield self.name, tuple(zip(self.labelnames, lv, strict=True)), v


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = LAG_BUCKETS):
        super().__init__(name, help_text)
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.max = 0.0

    def observe(self, v: float) -> None:
        i = 0
        bounds = self.bounds
        n = len(bounds)
        while i < n and v > bounds[i]:
            i += 1
        self.counts[i] += 1
        self.sum += v
        self.count += 1
        if v > self.max:
            self.max = v

    def quantile(self, q: float) -> float:
        """Upper bucket bound holding quantile ``q`` (coarse; for summaries)."""
        if not self.count:
            return 0.0
        target = q * self.count
        acc = 0
        for i, c in enumerate(self.counts):
            acc += c
            if acc >= target:
                return self.bounds[i] if i < len(self.bounds) else self.max
        return self.max

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        acc = 0
        for bound, c in zip((*self.bounds, math.inf), self.counts, strict=True):
            acc += c
            yield self.name + "_bucket", (("le", _num(bound)),), acc
        yield self.name + "_sum", (), self.sum
        yield self.name + "_count", (), self.count


class Registry:
    def __init__(self, const_labels: dict[str, str] | None = None) -> None:
        self.const = tuple((const_labels or {}).items())
        self.metrics: list[_Metric] = []

    def add(self, metric: _Metric) -> _Metric:
        self.metrics.append(metric)
        return metric

    def counter(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> Counter:
        c = Counter(name, help_text, labelnames)
        self.metrics.append(c)
        return c

    def gauge(
        self,
        name: str,
        help_text: str,
        fn: Callable[[], float] | None = None,
        labelnames: tuple[str, ...] = (),
    ) -> Gauge:
        g = Gauge(name, help_text, fn, labelnames)
        self.metrics.append(g)
        return g

    def histogram(
        self, name: str, help_text: str, buckets: tuple[float, ...] = LAG_BUCKETS
    ) -> Histogram:
        h = Histogram(name, help_text, buckets)
        self.metrics.append(h)
        return h

    def collect(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        """Every sample now: (name, labels with the constant ones first, value)."""
        for m in self.metrics:
            for name, labels, value in m.samples():
                yield name, (*self.const, *labels), value

    def render(self) -> str:
        out: list[str] = []
        for m in self.metrics:
            out.append(f"# HELP {m.name} {m.help}")
            out.append(f"# TYPE {m.name} {m.kind}")
            for name, labels, value in m.samples():
                out.append(f"{name}{_labels((*self.const, *labels))} {_num(value)}")
        return "\n".join(out) + "\n"
