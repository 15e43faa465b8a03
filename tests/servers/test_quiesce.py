"""The ladder's seam between points (harness.drive.quiesce) against a real PDD router.

A relayed request is answered by RLD while its P→MD transfer still crosses a slow WAN: the
client is done, the deployment is not. ``wait_quiet`` must see that work (the router's
``pdd_flows_pending`` / link bytes in flight) and return only once it has finished.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from pddbench.harness.drive.quiesce import Quiet, busy_series, wait_quiet

from .helpers import complete, deployment, running

pytestmark = pytest.mark.timeout(60)


def test_wait_quiet_waits_for_a_relayed_requests_wan_transfer() -> None:
    spec = deployment(
        "pdd",
        {"prefill": 1, "relay-decode": 1, "main-decode": 1},
        step_overhead_s=0.01,
        routing={"pipeline_policy": "always-relay"},
    )
    # 4,000 tokens x 46,490 B x 1e-3 = 186 KB at 150 KB/s: > 1 s on the stand-in WAN
    slow = {"md0": {"rate_bytes_per_s": 1.5e5, "delay_s": 0.01}}

    async def main() -> tuple[Quiet, Quiet, Quiet, dict[str, float]]:
        async with running(spec, slow) as (_, url, _):
            async with aiohttp.ClientSession() as http:
                done = await complete(http, url, list(range(1, 4001)), 2, "q0")
                assert done.status == 200 and done.pdd is not None
                assert done.pdd["pipeline"] == "P->RLD->MD"
                async with http.get(url + "/metrics") as r:
                    during = busy_series(await r.text())
            metrics = url.rstrip("/") + "/metrics"
            early = await asyncio.to_thread(wait_quiet, metrics, 0.0)
            settled = await asyncio.to_thread(wait_quiet, metrics, 20.0)
            again = await asyncio.to_thread(wait_quiet, metrics, 0.0)
            return early, settled, again, during

    early, settled, again, during = asyncio.run(main())
    assert during.get("pdd_flows_pending", 0) >= 1, during
    assert not early.quiet and early.known and early.busy, early
    assert settled.quiet and settled.known and settled.waited_s > 0.1, settled
    assert again.quiet and again.waited_s < 1.0


def test_wait_quiet_gives_up_and_says_what_was_busy() -> None:
    ticks = iter(range(100))
    q = wait_quiet(
        "http://x/metrics",
        3.0,
        read=lambda _: {"pdd_inflight_requests": 2.0, "pdd_flows_pending": 0.0},
        clock=lambda: float(next(ticks)),
        sleep=lambda _: None,
    )
    assert not q.quiet and q.known and q.busy == {"pdd_inflight_requests": 2.0}
    assert "pdd_inflight_requests 2" in q.describe()
    for unwatched in ({}, None):  # no busy series; no /metrics at all
        blind = wait_quiet(
            "http://x/metrics", 3.0, read=lambda _, u=unwatched: u, sleep=lambda _: None
        )
        assert blind.quiet and not blind.known
