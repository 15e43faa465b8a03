"""The per-request SLA check: which requests meet each target of an :class:`SLA`.

Owns :func:`check` (vectorised over a :class:`RecordSet`); the rule a request meets is
:class:`~pddbench.harness.config.sla.SLA`'s (its docstring states it). Computes no rates
(goodput lives in the metrics); reads no files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.config.sla import SLA


@dataclass(frozen=True)
class SlaCheck:
    """Per-request outcome of an SLA check (boolean arrays over the records' rows)."""

    ttft_ok: np.ndarray
    tpot_ok: np.ndarray
    e2e_ok: np.ndarray
    met: np.ndarray


def check(sla: SLA, records: RecordSet) -> SlaCheck:
    """Which requests meet each target and the whole SLA (vectorised)."""
    ok = records.ok
    n = records.num
    with np.errstate(invalid="ignore"):
        ttft_ok = ok if sla.ttft_s is None else ok & (n["ttft_s"] <= sla.ttft_s)
        tpot = n["tpot_s"]
        tpot_ok = ok if sla.tpot_s is None else ok & (np.isnan(tpot) | (tpot <= sla.tpot_s))
        asked = n["expected_output_tokens"]  # the work asked; what came out when unknown
        bound = sla.e2e_bound(np.where(np.isfinite(asked), asked, n["output_tokens"]))
        e2e_ok = ok if bound is None else ok & (n["e2e_s"] <= bound)
    return SlaCheck(ttft_ok, tpot_ok, e2e_ok, ttft_ok & tpot_ok & e2e_ok)
