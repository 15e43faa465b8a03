"""SLA attainment, goodput, error rate and BCR.

* ``sla_attainment`` = requests meeting every SLA target ÷ requests *sent* (failed,
  timed-out and cancelled requests count as misses; skipped ones were never sent and are
  left out — the failure that caused them is already a miss). ``sla_attainment_ttft`` /
  ``_tpot`` / ``_e2e``: the same for one target alone.
* ``goodput`` = requests meeting every SLA target ÷ the run window (req/s), as in
  DistServe; unaffected by how failures are counted.
* ``error_rate`` = records whose status is not ok ÷ all records (skipped included).
* ``bcr`` = goodput ÷ hardware cost of the scenario (``scenario.cost``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.cost import bcr
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Context,
    Direction,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.sla import check
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.analysis.units import Unit


def _attainment(records: RecordSet, met: np.ndarray) -> float:
    return ratio(float(np.count_nonzero(met & records.sent)), float(np.count_nonzero(records.sent)))


class SlaAttainment(ScalarMetric):
    tag = "sla_attainment"
    header = "SLA attainment"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.HIGHER
    description = "share of sent requests meeting every SLA target (failures count as misses)"
    nan_means = "nothing was sent"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return _attainment(records, check(ctx.sla, records).met)


class SlaAttainmentTTFT(ScalarMetric):
    tag = "sla_attainment_ttft"
    header = "TTFT target met"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.HIGHER
    description = "share of sent requests that are ok and meet the TTFT target"
    nan_means = "nothing was sent"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return _attainment(records, check(ctx.sla, records).ttft_ok)


class SlaAttainmentTPOT(ScalarMetric):
    tag = "sla_attainment_tpot"
    header = "TPOT target met"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.HIGHER
    description = "share of sent requests that are ok and meet the TPOT target"
    nan_means = "nothing was sent"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return _attainment(records, check(ctx.sla, records).tpot_ok)


class SlaAttainmentE2E(ScalarMetric):
    tag = "sla_attainment_e2e"
    header = "E2E target met"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.HIGHER
    description = "share of sent requests that are ok and meet the E2E target"
    nan_means = "nothing was sent"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return _attainment(records, check(ctx.sla, records).e2e_ok)


class Goodput(ScalarMetric):
    tag = "goodput"
    header = "SLA goodput"
    unit = Unit.REQ_PER_S
    direction = Direction.HIGHER
    requires = ("duration",)
    description = "requests meeting every SLA target per second of the run window"
    nan_means = "the run window is undefined (empty run)"
    min_change = 0.01

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        met = float(np.count_nonzero(check(ctx.sla, records).met))
        return ratio(met, deps["duration"].value)


class ErrorRate(ScalarMetric):
    tag = "error_rate"
    header = "error rate"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.LOWER
    description = "records whose status is not ok (error, timeout, cancelled, skipped) ÷ records"
    nan_means = "no records"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(float(records.n - np.count_nonzero(records.ok)), float(records.n))


class BCR(ScalarMetric):
    tag = "bcr"
    header = "BCR"
    unit = Unit.REQ_PER_S_PER_COST
    direction = Direction.HIGHER
    requires = ("goodput",)
    description = "benefit-cost ratio: SLA goodput ÷ the scenario's hardware cost"
    nan_means = "the scenario declares no cost model"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return bcr(deps["goodput"].value, ctx.cost)
