"""The resource that bound a measured point: read from the requests that missed the SLA.

Owns :func:`measured_binding`: of the measured requests that missed, those that missed the
TPOT target (decoders too slow: decode TPOT), and of those that missed the TTFT target
the part of their TTFT that dominates (P's queue and prefill: prefill; the KV transfer
over the WAN: WAN, within the DC: KV transfer; the first decode: decode queue; the
router: router). Failed requests are named apart. Sans-IO over a
:class:`~pddbench.harness.analysis.recordset.RecordSet`; the model's view of the same
question is :mod:`~pddbench.harness.sizing.bounds`'.
"""

from __future__ import annotations

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.sla import check
from pddbench.harness.config.sla import SLA
from pddbench.harness.sizing.bounds import DECODE_TPOT, PREFILL, WAN

# a TTFT part -> the resource it spends
PART_RESOURCE = {
    "ttft_to_router_s": "client network",
    "ttft_router_queue_s": "router",
    "ttft_p_queue_s": PREFILL,
    "ttft_prefill_s": PREFILL,
    "ttft_kv_transfer_s": "KV transfer",
    "ttft_kv_landing_s": "KV transfer",
    "ttft_first_decode_s": "decode queue",
    "ttft_to_client_s": "client network",
}


def measured_binding(records: RecordSet, sla: SLA, measured: np.ndarray) -> tuple[str, str]:
    """(resource, how it was read) for the ``measured`` requests of one point."""
    c = check(sla, records)
    miss = measured & ~c.met
    n_miss = int(miss.sum())
    if n_miss == 0:
        return "none", "no measured request missed the SLA"
    failed = miss & ~records.ok
    ttft_miss = miss & records.ok & ~c.ttft_ok
    tpot_miss = miss & records.ok & c.ttft_ok & ~c.tpot_ok
    counts = (
        f"{n_miss} missed: {int(ttft_miss.sum())} TTFT, {int(tpot_miss.sum())} TPOT, "
        f"{int(failed.sum())} failed"
    )
    if failed.sum() > max(ttft_miss.sum(), tpot_miss.sum()):
        return "failures", counts
    if tpot_miss.sum() >= ttft_miss.sum():
        return DECODE_TPOT, counts
    spent: dict[str, float] = {}
    for col, resource in PART_RESOURCE.items():
        if col not in records.num:
            continue
        v = records.num[col][ttft_miss]
        v = v[np.isfinite(v)]
        if v.size:
            spent[resource] = spent.get(resource, 0.0) + float(v.sum()) / int(ttft_miss.sum())
    if not spent:
        return "TTFT", counts + " (no TTFT decomposition)"
    resource = max(spent, key=lambda k: spent[k])
    if resource == "KV transfer" and "kv_path" in records.cat:
        wan = records.cat["kv_path"].take(ttft_miss).equals("wan")
        if wan.size and wan.mean() >= 0.5:
            resource = WAN
    parts = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
    return resource, f"{counts}; mean TTFT of those missing it: {parts}"
