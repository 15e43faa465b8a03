"""The metrics registry: discovery, duplicate tags, dependency order and errors."""

from __future__ import annotations

import types
from collections.abc import Mapping

import numpy as np
import pytest

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Context,
    Direction,
    DistributionMetric,
    MetricRegistry,
    MetricResult,
    ScalarMetric,
    default_registry,
)
from pddbench.harness.analysis.units import Unit
from tests.analysis.runs import rows_table


class Count(ScalarMetric):
    tag = "count"
    header = "count"
    unit = Unit.REQUESTS

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return float(records.n)


class Double(ScalarMetric):
    tag = "double"
    header = "double"
    unit = Unit.REQUESTS
    requires = ("count",)

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return 2 * deps["count"].value


class Quadruple(ScalarMetric):
    tag = "quad"
    header = "quad"
    unit = Unit.REQUESTS
    requires = ("double",)

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return 2 * deps["double"].value


class Inputs(DistributionMetric):
    tag = "inputs"
    header = "inputs"
    unit = Unit.TOKENS
    direction = Direction.NONE

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        return records.col("input_tokens")


def test_dependencies_come_first_and_are_pulled_in() -> None:
    reg = MetricRegistry()
    for cls in (Quadruple, Double, Count, Inputs):
        reg.register(cls)
    assert [m.tag for m in reg.ordered(["quad"])] == ["count", "double", "quad"]
    records = RecordSet.from_arrow(
        rows_table(
            [
                {
                    "request_id": "a",
                    "session_id": "s",
                    "turn_index": 0,
                    "intended_send_s": 0.0,
                    "input_tokens": 7,
                }
            ]
        )
    )
    ms = reg.compute(records, tags=["quad", "inputs"])
    assert ms.value("quad") == 4.0
    assert ms.value("inputs.p50") == 7.0
    assert "count" in ms  # computed as a dependency


def test_duplicate_tag_is_rejected() -> None:
    reg = MetricRegistry()
    reg.register(Count)

    class Other(Count):
        tag = "count"

    with pytest.raises(ValueError, match="duplicate metric tag 'count'"):
        reg.register(Other)


def test_unknown_dependency_and_cycles_are_rejected() -> None:
    reg = MetricRegistry()
    reg.register(Double)
    with pytest.raises(KeyError, match="required by double"):
        reg.ordered()

    class A(Count):
        tag = "a"
        requires = ("b",)

    class B(Count):
        tag = "b"
        requires = ("a",)

    reg2 = MetricRegistry()
    reg2.register(A)
    reg2.register(B)
    with pytest.raises(ValueError, match="cycle"):
        reg2.ordered()


def test_bad_tag_is_rejected() -> None:
    class Dotted(Count):
        tag = "a.b"

    with pytest.raises(ValueError, match=r"without '\.'"):
        MetricRegistry().register(Dotted)


def test_discovery_finds_classes_defined_in_a_package_module() -> None:
    module = types.ModuleType("fake_metrics")
    module.__path__ = []  # type: ignore[attr-defined]
    Count.__module__ = module.__name__
    module.Count = Count  # type: ignore[attr-defined]
    try:
        reg = MetricRegistry().discover(module)
    finally:
        Count.__module__ = __name__
    assert reg.tags() == ("count",)


def test_default_registry_declares_every_metric_fully() -> None:
    reg = default_registry()
    for m in reg:
        assert m.header and m.description and m.nan_means, m.tag
        assert m.scale > 0
    for tag in (
        "ttft",
        "tpot",
        "itl",
        "itl_mean",
        "e2e",
        "schedule_lag",
        "completed_rps",
        "goodput",
        "sla_attainment",
        "error_rate",
        "bcr",
        "rld_token_share",
        "wan_bandwidth",
        "handoff_spike",
        "task_completion",
        "session_goodput",
        "cache_fidelity",
    ):
        assert tag in reg
    assert reg["ttft"].direction is Direction.LOWER
    assert reg["goodput"].direction is Direction.HIGHER
