"""SLA attainment, goodput, error rate and BCR.

* ``sla_attainment`` = requests meeting every SLA target ÷ requests *sent* (failed,
  timed-out and cancelled requests count as misses; skipped ones were never sent and are
  left out — the failure that caused them is already a miss). ``sla_attainment_ttft`` /
  ``_tpot`` / ``_e2e``: the same for one target alone.
* ``goodput`` = requests meeting every SLA target ÷ the run window (req/s), as in
  DistServe; unaffected by how failures are counted.
* ``error_rate`` = records whose status is neither ok nor censored ÷ all records (skipped
  included). ``censored_rate`` = records the harness's own request limit cut while the
  server was still answering ÷ all records: the harness's choice, never a server error (in
  ``sla_attainment`` they are sent and count as misses; a capacity ladder censors them).
* ``bcr`` = goodput ÷ hardware cost of the scenario (``scenario.cost``).

The metrics are declared in ``catalog.py``; this module holds their computations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Compute, Context, MetricResult
from pddbench.harness.analysis.sla import SlaCheck, check
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.config.cost import bcr


def attainment(target: Callable[[SlaCheck], np.ndarray]) -> Compute:
    """Share of sent records that pass ``target`` of their SLA check (``met``, ``ttft_ok``...)."""

    def share(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        met = target(check(ctx.sla, records))
        sent = records.sent
        return ratio(float(np.count_nonzero(met & sent)), float(np.count_nonzero(sent)))

    return share


def met_count(records: RecordSet, ctx: Context) -> float:
    """How many records meet every SLA target."""
    return float(np.count_nonzero(check(ctx.sla, records).met))


def error_rate(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Records whose status is neither ok nor censored ÷ records."""
    failed = records.n - np.count_nonzero(records.ok | records.censored)
    return ratio(float(failed), float(records.n))


def censored_rate(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Records cut by the harness's own request limit ÷ records."""
    return ratio(float(np.count_nonzero(records.censored)), float(records.n))


def benefit_cost(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """SLA goodput (metric ``goodput``) ÷ the scenario's hardware cost."""
    return bcr(deps["goodput"].value, ctx.cost)
