"""A topology's ``[network.schedule]`` while a replay runs: timed changes and cross flows.

Started by :meth:`Topology.start_wan_schedule` at the replay's start (``t0``, monotonic):
rate swings, loss and other changes go through ``Topology.apply_change`` on time
(``ScheduleRunner``); each cross-traffic flow is a real TCP flow between the two sites'
probe hosts, sharing the line with the systems' traffic. ``stop`` returns one
:class:`ChangeRecord` per state change, starting with every direction's state at ``t0``,
which the harness writes into ``links.parquet``. Must not decide what to schedule.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from pddbench.netem.probe import Endpoint
from pddbench.netem.schedule import ChangeRecord
from pddbench.netem.transfer import CrossFlow

if TYPE_CHECKING:
    from pddbench.netem.topology import Topology


class WanScheduleRun:
    """The ``[network.schedule]`` of a topology, running: timed changes and cross flows."""

    def __init__(self, topo: Topology, t0: float) -> None:
        self.topo, self.t0 = topo, t0
        self.records: list[ChangeRecord] = topo.initial_records(t0)
        self.runner = topo.run_schedule(topo.config.schedule_plan(), t0)
        self.flows: list[tuple[Any, CrossFlow, threading.Thread]] = []
        for ct in topo.config.schedule.cross_traffic:
            wan = topo.plan.wan(ct.link)
            src_site, dst_site = (wan.a, wan.b) if ct.direction == "a_to_b" else (wan.b, wan.a)
            hs, hd = topo.plan.probe_host(src_site), topo.plan.probe_host(dst_site)
            rate = None if ct.rate_mbit is None else int(ct.rate_mbit / topo.plan.scale * 125_000)
            flow = CrossFlow(
                Endpoint(hs.netns, hs.address),
                Endpoint(hd.netns, hd.address),
                topo.tcp.congestion,
                start=t0 + ct.start_s,
                duration_s=ct.duration_s,
                rate_bps=rate,
            )
            thread = threading.Thread(target=flow.run, name="netem-cross", daemon=True)
            thread.start()
            self.flows.append((ct, flow, thread))

    def stop(self) -> list[ChangeRecord]:
        """Stop what is still running; every record so far, in time order."""
        self.runner.stop()
        records = list(self.records) + list(self.runner.records)
        for ct, flow, thread in self.flows:
            flow.stopped.set()
            thread.join(timeout=ct.duration_s + 30)
            if flow.seconds <= 0:
                continue
            sd = self.topo.directions[f"{ct.link}:{ct.direction}"]
            for at, mbit in (
                (ct.start_s, flow.mbit * self.topo.plan.scale),
                (ct.start_s + flow.seconds, 0.0),
            ):
                records.append(
                    ChangeRecord(
                        link=ct.link,
                        direction=ct.direction,
                        changes={"cross_traffic": "start" if mbit else "stop"},
                        backend=sd.backend,
                        t_unix=time.time() - (time.monotonic() - (self.t0 + at)),
                        t_mono=self.t0 + at,
                        at_s=at,
                        cross_traffic_mbit=mbit,
                    )
                )
        return sorted(records, key=lambda r: r.t_mono)

    @property
    def errors(self) -> list[str]:
        return list(self.runner.errors)
