"""The emulated deployment's host costs: what its Python processes add to each hop of a TTFT.

The reference servers run as real processes on the harness's host: the router reads and
parses a prompt of up to ~100K token ids and hashes its blocks, an instance parses the
request the router forwards, a decoder scatters landed KV into its pages, every event and
token is an HTTP chunk. None of that is GPU time, and the twin's compute and link models do
not price it; on a 2-vCPU host it is tens of milliseconds per request. Owns
:class:`HostCosts` (one fixed latency per hop, zero by default: the twin of the hardware)
and :func:`fit_host_costs`, which measures them from an emulated run and the twin's replay
of the same plan, request by request: each hop's median excess of the emulated TTFT part
over the twin's (medians: a busy host's stalls are the emulator's noise, not its cost).
The twin adds them where the hop happens when it is given a fitted file (the check against
the emulated run); the verdict and the sizing search price hardware and use none.
Sans-IO: tables in, numbers out; must not run a replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

# hop -> the TTFT part it lands in (pddbench.harness.analysis.ttft_parts)
HOPS: dict[str, str] = {
    "request_in_s": "to_router",  # client -> router: the body's bytes and parse
    "route_s": "router_queue",  # the router's work before it routes (hashes, posts)
    "open_s": "p_queue",  # an instance reading the request the router forwards
    "send_s": "kv_transfer",  # P's sender putting a finished prefill's last KV on the wire
    "landing_s": "kv_landing",  # a decoder taking landed KV
    "message_s": "first_decode",  # an instance's event or tokens, read by the router
    "to_client_s": "to_client",  # router -> client: the first chunk
}


class HostCosts(BaseModel):
    """Fixed latencies per hop (seconds), measured on one host; zero: hardware only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_in_s: float = Field(0.0, ge=0.0)
    route_s: float = Field(0.0, ge=0.0)
    open_s: float = Field(0.0, ge=0.0)
    send_s: float = Field(0.0, ge=0.0)
    landing_s: float = Field(0.0, ge=0.0)
    message_s: float = Field(0.0, ge=0.0)
    to_client_s: float = Field(0.0, ge=0.0)
    requests: int = 0  # paired requests the fit used (0: not fitted)
    source: str = "none: the twin of the hardware"

    @property
    def total_s(self) -> float:
        return sum(getattr(self, hop) for hop in HOPS)


NONE = HostCosts()


@dataclass(frozen=True)
class HopFit:
    hop: str
    part: str
    pairs: int
    median_s: float
    p90_s: float


def hop_excess(emulated: pd.DataFrame, virtual: pd.DataFrame, *, wan: bool = False) -> list[HopFit]:
    """Per hop, the emulated part's excess over the twin's on the requests both answered
    (paired by request id). A KV transfer's sending and landing count only in-DC
    transfers: over the WAN they are the link's, which a link model's fitted rate prices.
    ``wan``: the twin runs the configured links (no fitted ones), so the WAN transfers'
    residual is this host's too (its emulated line, its senders and receivers) and they
    count beside the in-DC ones (cross-dc-pd has no in-DC transfer: without them its
    sending and landing were never fitted, and the check's twin held a KV stream ~40 ms
    less per transfer than the emulated servers did)."""
    e = emulated[emulated.status == "ok"].set_index("request_id")
    v = virtual[virtual.status == "ok"].set_index("request_id")
    both = e.merge(v, how="inner", left_index=True, right_index=True, suffixes=("", "_v"))
    out = []
    for hop, part in HOPS.items():
        rows = both
        if hop in ("send_s", "landing_s") and "kv_path" in both:
            rows = both[both.kv_path.isin(("intra", "wan") if wan else ("intra",))]
        d = (rows[f"ttft_{part}_s"] - rows[f"ttft_{part}_s_v"]).to_numpy(dtype=float)
        d = d[np.isfinite(d)]
        med = float(np.median(d)) if d.size else 0.0
        p90 = float(np.percentile(d, 90)) if d.size else 0.0
        out.append(HopFit(hop, part, int(d.size), med, p90))
    return out


def fit_host_costs(
    emulated: pd.DataFrame,
    virtual: pd.DataFrame,
    source: str,
    start: HostCosts = NONE,
    *,
    wan: bool = False,
) -> HostCosts:
    """:class:`HostCosts` from an emulated run's records and the twin's of the same plan,
    the twin run with ``start``: each hop's ``start`` value plus its median residual (a
    hop's cost shows in later parts too — a PD router routes once the decoder's admission
    event is back — so a fit is repeated with the twin re-run on the last one until the
    residuals vanish); a hop never costs less than nothing. ``wan``: :func:`hop_excess`'s."""
    return costs_from(hop_excess(emulated, virtual, wan=wan), source, start)


def costs_from(fits: list[HopFit], source: str, start: HostCosts = NONE) -> HostCosts:
    """``start`` plus each hop's median residual in ``fits`` (never below nothing)."""
    pairs = min((f.pairs for f in fits if f.hop not in ("send_s", "landing_s")), default=0)
    values = {f.hop: max(0.0, getattr(start, f.hop) + f.median_s) for f in fits}
    return HostCosts(**values, requests=pairs, source=source)
