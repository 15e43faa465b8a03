"""The twin's run-folder files beside ``requests.parquet``: ``server_metrics.parquet`` and
``links.parquet``, with the same columns and meaning as an emulated run's.

Owns :class:`TwinOutputs`, attached to a :class:`~pddbench.twin.run.Twin` before its clock
starts (``run_twin(observe=...)``):

* **server metrics** — every ``interval_s`` of virtual time (the emulated scraper's 1 s,
  wider for a long replay, see :func:`scrape_interval`), each worker's registry of the
  series its engine and KV pool back (:func:`~pddbench.servers.instance_metrics.
  add_engine_series`, the very ones a server exports on ``/metrics``) is collected and
  mapped to common names as the harness's scraper maps a server's
  (:func:`~pddbench.harness.drive.scrape.rows_from_samples`, without the text round
  trip); one scrape at 0 and one at or
  after the last answer, as the scraper's first and last. The series a server's I/O
  driver counts itself (requests, KV bytes per peer, tokens emitted, scheduler lag, loop
  lag) are not exported: the twin has no such driver, and a zero would be a false figure.
* **links** — one ``kind = "probe"`` row per WAN link, measured on the model as the
  emulated probe measures the line (200 ping-pongs through the model's own control class
  with its jitter, the bulk class's rate for the goodput; ``backend_* = "virtual"``, the
  same ``expected_rtt_*``); with a ``[network.schedule]``, ``kind = "change"`` rows from the
  link model's timeline (the first state of every direction at 0, as the emulated WAN's
  first records); and ``kind = "usage"`` rows: the bytes each WAN direction carried per
  interval (:class:`~pddbench.netem.probe.LinkUsage`).

Times are virtual seconds from the run's start (the manifest's clock: ``kind =
"virtual"``, origin 0). Must not decide what the twin decides, read a wall clock or
change the records.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from pddbench.harness.drive.replay import METRICS_INTERVAL_S
from pddbench.harness.drive.scrape import MetricRow, rows_from_samples, write_server_metrics
from pddbench.harness.engines.metrics import Sample
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest, ServerMetricsInfo
from pddbench.netem.delayline import DelaySettings
from pddbench.netem.probe import (
    LinkProbe,
    LinkUsage,
    expected_rtt,
    summarize_rtt,
    write_link_probes,
)
from pddbench.netem.schedule import ChangeRecord
from pddbench.servers.instance_metrics import add_engine_series
from pddbench.servers.metrics import Registry
from pddbench.twin.links import Direction, cross_take, wan_params
from pddbench.twin.run import Twin

BACKEND = "virtual"
MAX_SCRAPES = 10_000  # a long replay is sampled more coarsely, not without end
PROBE_PINGS = 200  # as the emulated probe's RTT samples


def scrape_interval(planned: list[PlannedRequest]) -> float:
    """The emulated scraper's interval, widened so a long replay keeps at most about
    ``MAX_SCRAPES`` scrapes (the span: the last planned arrival)."""
    span = max((r.arrival_s for r in planned), default=0.0)
    return max(METRICS_INTERVAL_S, span / MAX_SCRAPES)


class TwinOutputs:
    """Samples one twin's servers and links; writes their files into a run folder."""

    def __init__(self, interval_s: float = METRICS_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.rows: list[MetricRow] = []
        self.scrapes = 0
        self.twin: Twin | None = None
        self._registries: dict[str, Registry] = {}

    def attach(self, twin: Twin) -> None:
        """Join ``twin``'s clock (before it starts): the scrapes and the links' byte counts."""
        self.twin = twin
        twin.net.track_usage(self.interval_s)
        for wid, w in twin.workers.items():
            r = Registry({"instance": wid, "role": w.inst.role.value})
            add_engine_series(r, w.engine, w.pool)
            self._registries[wid] = r
        twin.sim.at(0.0, self._scrape)

    def _scrape(self) -> None:
        assert self.twin is not None
        sim = self.twin.sim
        if math.isinf(sim.now):  # what a link down for good never delivers: not a scrape
            return
        for wid, r in self._registries.items():
            samples = [Sample(n, tuple(sorted(lab)), v) for n, lab, v in r.collect()]
            self.rows.extend(rows_from_samples(samples, wid, sim.now))
        self.scrapes += 1
        nxt = sim.next_time()
        if nxt is not None and nxt < math.inf:  # something left to happen: scrape again
            sim.at(sim.now + self.interval_s, self._scrape)

    # -- the files ------------------------------------------------------------------------
    def write(self, paths: RunPaths, manifest: RunManifest, end_s: float) -> None:
        """Both files, up to the first scrape at or after ``end_s`` (the last answer), and
        their manifest entries (``server_metrics``, ``links``, the virtual clock)."""
        assert self.twin is not None
        last = self.interval_s * math.ceil(end_s / self.interval_s)
        rows = [r for r in self.rows if r.t_s <= last + 1e-9]
        write_server_metrics(rows, paths.server_metrics)
        scrapes = len({r.t_s for r in rows})
        manifest.server_metrics = ServerMetricsInfo(
            interval_s=self.interval_s, scrapes=scrapes, rows=len(rows), failures={}, last_error={}
        )
        probes = self.probes(manifest.run_id)
        changes = self.changes() if self._scheduled() else []
        usage = self.usage(manifest.run_id, last)
        if probes or changes or usage:
            write_link_probes(probes, str(paths.links), changes, usage)
        manifest.links = [asdict(p) for p in probes]

    def _scheduled(self) -> bool:
        assert self.twin is not None
        net = self.twin.net.net
        return net is not None and not net.schedule.empty

    def probes(self, run_id: str) -> list[LinkProbe]:
        """Each WAN link probed on the model (its configured state at the run's start)."""
        assert self.twin is not None
        net = self.twin.net.net
        if net is None:
            return []
        out = []
        lines = self.twin.net.timelines
        for link in net.links:
            name = link.link_name
            fwd, back = lines[(name, "a_to_b")][0], lines[(name, "b_to_a")][0]
            pf, pb = wan_params(fwd, net.segment), wan_params(back, net.segment)
            there = Direction(pf, f"probe:{name}:a_to_b", [])
            home = Direction(pb, f"probe:{name}:b_to_a", [])
            rtts = []
            for k in range(PROBE_PINGS):
                t = float(k)  # one ping in flight, as the emulated ping-pong
                arrive = there.control(t, 64)
                rtts.append((home.control(arrive, 64) - t) * 1000.0)
            exp50, exp99 = expected_rtt(
                DelaySettings.from_shape(fwd.shape), DelaySettings.from_shape(back.shape)
            )
            summary = summarize_rtt(rtts, 0)
            out.append(
                LinkProbe(
                    run_id=run_id,
                    link=name,
                    a=link.a,
                    b=link.b,
                    scale=1.0,
                    backend_a_to_b=BACKEND,
                    backend_b_to_a=BACKEND,
                    qos=fwd.shape.qos,
                    **summary.probe_fields(),  # type: ignore[arg-type]
                    expected_rtt_p50_ms=exp50,
                    expected_rtt_p99_ms=exp99,
                    rate_a_to_b_mbit=fwd.shape.rate_mbit,
                    rate_b_to_a_mbit=back.shape.rate_mbit,
                    goodput_a_to_b_mbit=_mbit(pf.bulk_rate),
                    goodput_b_to_a_mbit=_mbit(pb.bulk_rate),
                    loss_a_to_b_pct=fwd.shape.loss_pct,
                    loss_b_to_a_pct=back.shape.loss_pct,
                    t_unix=math.nan,  # no wall clock: virtual time
                )
            )
        return out

    def changes(self) -> list[ChangeRecord]:
        """Every WAN direction's states over the run, as the emulated WAN records them."""
        assert self.twin is not None
        out = []
        for (link, direction), states in self.twin.net.timelines.items():
            for s in states:
                cross = None
                if "cross_traffic" in s.changes:
                    cross = cross_take(s.shape, s.cross_mbit)
                out.append(
                    ChangeRecord(
                        link=link,
                        direction=direction,
                        changes=dict(s.changes),
                        backend=BACKEND,
                        t_unix=math.nan,
                        t_mono=s.t_s,
                        at_s=s.t_s,
                        lag_ms=0.0,
                        rate_mbit=s.shape.rate_mbit,
                        delay_ms=s.shape.delay_ms,
                        jitter_ms=s.shape.jitter_ms,
                        loss_pct=s.shape.loss_pct,
                        up=s.up,
                        cross_traffic_mbit=cross,
                    )
                )
        return sorted(out, key=lambda r: r.t_mono)

    def usage(self, run_id: str, until_s: float) -> list[LinkUsage]:
        """What each WAN direction carried per interval, from 0 to ``until_s``."""
        assert self.twin is not None
        net = self.twin.net
        w = self.interval_s
        out = []
        for link, direction in net.timelines:
            d = net.wan_direction(link, direction)
            bins = math.ceil(until_s / w)
            for k in range(bins):
                bulk = d.usage.bulk.get(k, 0.0) if d is not None and d.usage else 0.0
                ctrl = d.usage.control.get(k, 0.0) if d is not None and d.usage else 0.0
                if d is not None:
                    avail = d.mean_line_bytes_per_s(k * w, (k + 1) * w)
                else:
                    avail = net.timelines[(link, direction)][0].shape.rate_mbit
                    avail = math.inf if avail is None else avail * 1e6 / 8
                rate = None if math.isinf(avail) else _mbit(avail)
                out.append(
                    LinkUsage(
                        run_id=run_id,
                        link=link,
                        direction=direction,
                        backend=BACKEND,
                        t_mono=k * w,
                        interval_s=w,
                        bulk_bytes=bulk,
                        control_bytes=ctrl,
                        rate_mbit=rate,
                        goodput_mbit=_mbit(bulk / w),
                        utilisation=None if math.isinf(avail) or avail <= 0 else bulk / w / avail,
                    )
                )
        return out


def _mbit(bytes_per_s: float) -> float:
    return bytes_per_s * 8 / 1e6
