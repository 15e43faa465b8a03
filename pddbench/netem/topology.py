"""A running emulated network: build it from a plan, use it, tear it down completely.
(Over 500 lines for one reason: a single class owns the whole lifecycle of a run's network.)


``with Topology.up(config, run_id=...) as topo:`` creates one namespace per site switch
(a bridge for the intra-site segment, routed WAN veths to other sites), per instance and
per client, all through pyroute2 inside the namespaces (nothing in the root namespace,
no default route anywhere), shapes every WAN direction (``links``), sizes TCP buffers
(``tcp``), and records everything in a run state file (``state``) as it goes. On exit —
normal, exception, SIGINT or SIGTERM — it kills every process inside its namespaces and
deletes them; a SIGKILLed owner leaves a state file that ``cleanup`` uses.

It must not know about LLM servers: ``spawn`` starts any argv inside an instance's
namespace with PDEATHSIG, and ``address`` says where to reach it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from pddbench.errors import UserError
from pddbench.netem import nsutil
from pddbench.netem.backend import Capabilities, choose_backend, detect_capabilities
from pddbench.netem.cleanup import CleanupReport, remove_namespaces
from pddbench.netem.delayline import DelaySettings, stage_lead_us
from pddbench.netem.links import ShapedDirection, apply_tc
from pddbench.netem.plan import (
    EMULATED_NET,
    PREFIX,
    HostPlan,
    SwitchPlan,
    TopologyPlan,
    WanPlan,
    plan_topology,
)
from pddbench.netem.probe import (
    Endpoint,
    LinkProbe,
    best_goodput,
    expected_rtt,
    measure_rtt,
    measure_rtts,
    summarize_rtt,
)
from pddbench.netem.schedule import (
    ChangeDirection,
    ChangeRecord,
    LinkChange,
    Schedule,
    ScheduleRunner,
)
from pddbench.netem.shaping import shaping_requests
from pddbench.netem.slowstart import COMPENSATION_ENV, Compensation, wan_paths
from pddbench.netem.state import ProcessRecord, RunState, process_start_ticks
from pddbench.netem.steering import all_cpus_mask, read_rps, steer_flows
from pddbench.netem.tcp import (
    CONGESTION_ENV,
    RECORDED_KEYS,
    TcpSettings,
    buffer_bytes,
    resolve_congestion,
    tcp_sysctls,
)
from pddbench.netem.topology_config import NetworkConfig, Shape, change_directions

if TYPE_CHECKING:
    from pddbench.netem.wanrun import WanScheduleRun


def _address_up(ipr: Any, ifname: str, address: str, prefix_len: int) -> int:
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.addr("add", index=index, address=address, prefixlen=prefix_len)
    ipr.link("set", index=index, state="up")
    return index


def _wire_switch(ipr: Any, sw: SwitchPlan, members: list[HostPlan]) -> None:
    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    ipr.link("add", ifname=sw.bridge, kind="bridge")
    bridge = _address_up(ipr, sw.bridge, sw.address, 24)
    for host in members:
        peer = {"ifname": host.ifname, "net_ns_fd": host.netns}
        ipr.link("add", ifname=host.port_ifname, kind="veth", peer=peer)
        port = ipr.link_lookup(ifname=host.port_ifname)[0]
        ipr.link("set", index=port, master=bridge, state="up")


def _wire_host(ipr: Any, host: HostPlan) -> None:
    ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    _address_up(ipr, host.ifname, host.address, host.prefix_len)
    ipr.route("add", dst=str(EMULATED_NET), gateway=host.gateway)


def _wire_wan_a(ipr: Any, wan: WanPlan, peer_netns: str) -> None:
    peer = {"ifname": wan.b_ifname, "net_ns_fd": peer_netns}
    ipr.link("add", ifname=wan.a_ifname, kind="veth", peer=peer)
    _address_up(ipr, wan.a_ifname, wan.a_address, wan.prefix_len)


class Terminated(Exception):
    """SIGTERM/SIGHUP arrived while a topology was up."""


@dataclass(frozen=True)
class HostInfo:
    name: str
    kind: str
    site: str
    netns: str
    address: str


@dataclass
class TopologyReport:
    """How the network was emulated, to be stored with results."""

    run_id: str
    scale: float
    netem_available: bool
    netem_probe: str
    backends: dict[str, str]  # "link:direction" -> "backend (reason)"
    daemons: dict[str, dict[str, Any]]
    tcp: TcpSettings
    lead_us: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def new_run_id() -> str:
    return secrets.token_hex(3)


def guard_client_namespace(address: str) -> None:
    """Refuse to reach an emulated address from outside our namespaces (e.g. the root one).

    From the root namespace 198.18.0.0/15 is routed to the real network, so a client there
    would silently measure something else. Call it before a client connects.
    """
    if ipaddress.ip_address(address) in EMULATED_NET and not nsutil.in_named_netns(PREFIX):
        raise UserError(
            f"refusing to reach emulated address {address} from outside the emulated network"
            " (this is the root network namespace); start the client with Topology.spawn"
        )


@contextlib.contextmanager
def _signals_raise(enabled: bool) -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an exception (SIGINT already is one) so teardown runs."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    owner = os.getpid()

    def handler(signum: int, _frame: Any) -> None:
        if os.getpid() != owner:  # a forked child that has not exec'd yet: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Topology:
    """Owns the namespaces, links, shaping and processes of one run."""

    def __init__(
        self, config: NetworkConfig, run_id: str, *, seed: int | None = None, label: str = ""
    ) -> None:
        self.config = config
        self.plan: TopologyPlan = plan_topology(config, run_id)
        self.run_id = run_id
        self.seed = seed
        self.state = RunState.new(
            run_id, self.plan.prefix, config.model_dump(mode="json"), scenario=label
        )
        self.directions: dict[str, ShapedDirection] = {}
        self.changes: list[ChangeRecord] = []
        self.lead_us: dict[str, float] = {}  # userspace delay stage: latency offset per direction
        self.notes: list[str] = []
        self.caps: Capabilities | None = None
        self.tcp = TcpSettings(
            buffer_bytes=buffer_bytes(self.plan),
            congestion=resolve_congestion(config.tcp_congestion),
            congestion_asked=config.tcp_congestion,
            cold_start_compensation=config.cold_start_compensation and self.plan.scale > 1,
        )
        self._procs: list[subprocess.Popen[Any]] = []
        self._lock = threading.Lock()
        self._is_up = False
        self.cleanup_report: CleanupReport | None = None

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    @contextlib.contextmanager
    def up(
        cls,
        config: NetworkConfig,
        run_id: str | None = None,
        *,
        seed: int | None = None,
        handle_signals: bool = True,
        label: str = "",
    ) -> Iterator[Topology]:
        """Bring the network up for the ``with`` block; always torn down afterwards.

        Call it from the main thread, or from a thread that outlives the topology: the
        delay daemons and ``spawn``ed processes get SIGKILL when the thread that started
        them ends (PDEATHSIG). SIGTERM/SIGHUP become :class:`Terminated` (main thread only).
        """
        nsutil.require_net_admin()
        topo = cls(config, run_id or new_run_id(), seed=seed, label=label)
        with _signals_raise(handle_signals):
            try:
                topo._build()
                yield topo
            finally:
                topo.down()

    def _build(self) -> None:
        plan = self.plan
        if nsutil.list_netns(plan.prefix):
            raise UserError(
                f"namespaces of run {self.run_id!r} already exist;"
                f" run `pddbench netem cleanup {self.run_id}` or pick another run id"
            )
        self.state.save()
        self._is_up = True
        self.caps = detect_capabilities(self.run_id)
        for d in plan.directions():
            backend, reason = choose_backend(self.config.backend, self.caps, d.shape)
            self.directions[d.key] = ShapedDirection(d, backend, reason)
            self.state.backends[d.key] = backend
        for name in plan.namespaces():
            self.state.namespaces[name] = nsutil.create_netns(name)
            self.state.save()
        self._wire()
        self._tune_tcp()
        self._steer_flows()
        self._shape_segments()
        self._shape_wan()
        self.state.save()

    def _wire(self) -> None:
        """Bridges, veths, addresses and routes, each made inside its namespace."""
        plan = self.plan
        for sw in plan.switches:
            members = [h for h in plan.hosts if h.site == sw.site]
            nsutil.with_iproute(sw.netns, lambda ipr, sw=sw, m=members: _wire_switch(ipr, sw, m))
        for host in plan.hosts:
            nsutil.with_iproute(host.netns, lambda ipr, h=host: _wire_host(ipr, h))
        for wan in plan.wans:
            sw_a, sw_b = plan.switch(wan.a), plan.switch(wan.b)
            nsutil.with_iproute(sw_a.netns, lambda ipr, w=wan, b=sw_b: _wire_wan_a(ipr, w, b.netns))
            nsutil.with_iproute(
                sw_b.netns,
                lambda ipr, w=wan: _address_up(ipr, w.b_ifname, w.b_address, w.prefix_len),
            )
        for sw in plan.switches:
            for route in sw.routes:
                nsutil.with_iproute(
                    sw.netns, lambda ipr, r=route: ipr.route("add", dst=r.dst, gateway=r.gateway)
                )

    def _tune_tcp(self) -> None:
        switches = {s.netns for s in self.plan.switches}
        for name in self.plan.namespaces():
            values = tcp_sysctls(
                self.tcp.buffer_bytes,
                router=name in switches,
                slow_start_after_idle=self.config.tcp_slow_start_after_idle,
            )
            for key, err in nsutil.write_sysctls(name, values).items():
                self.tcp.write_errors.setdefault(key, err)
        probe_ns = self.plan.hosts[0].netns if self.plan.hosts else self.plan.switches[0].netns
        self.tcp.values = nsutil.read_sysctls(probe_ns, RECORDED_KEYS)
        if self.tcp.write_errors:
            self.notes.append(
                "not writable in child namespaces (recorded, autotuning uses tcp_rmem/tcp_wmem): "
                + ", ".join(sorted(self.tcp.write_errors))
            )

    def _steer_flows(self) -> None:
        """RPS on every interface (:mod:`~pddbench.netem.steering`): the emulated path
        keeps each flow's packets in order whichever CPU handles them. Recorded with the
        TCP settings; a failure is a note, not fatal (the run may then see reordering)."""
        mask = all_cpus_mask()
        failed = {}
        for name in self.plan.namespaces():
            why = steer_flows(name, mask)
            if why is not None:
                failed[name] = why
        probe_ns = self.plan.hosts[0].netns if self.plan.hosts else self.plan.switches[0].netns
        self.tcp.values["rps_cpus"] = read_rps(probe_ns)
        if failed:
            name, why = next(iter(failed.items()))
            self.notes.append(
                f"receive packet steering not set in {len(failed)} namespace(s) ({name}: {why}):"
                " packets of one flow may be reordered across CPUs"
            )

    def _shape_segments(self) -> None:
        assert self.caps is not None
        for seg in self.plan.segments:
            if seg.rate_mbit is None and seg.delay_us == 0:
                continue
            host = self.plan.host(seg.host)
            sw = self.plan.switch(host.site)
            shape = Shape(rate_mbit=seg.rate_mbit, delay_ms=seg.delay_us / 1000)
            use_netem = seg.delay_us > 0 and self.caps.netem
            if seg.delay_us > 0 and not use_netem:
                note = (
                    f"intra-site delay {seg.delay_us} µs not emulated without netem"
                    " (a veth hop adds ~10-30 µs)"
                )
                if note not in self.notes:
                    self.notes.append(note)
            requests = shaping_requests("kernel" if use_netem else "nfqueue", shape)
            apply_tc(sw.netns, host.port_ifname, requests)
            apply_tc(host.netns, host.ifname, requests)

    def _shape_wan(self) -> None:
        lead = self.config.nfqueue_lead_us
        for i, sd in enumerate(self.directions.values()):
            seed = None if self.seed is None else self.seed + i
            daemon = sd.start_daemon(seed, 0.0 if lead == "auto" else float(lead))
            if daemon is not None:
                self._record_process(daemon.pid, sd.plan.netns, f"delayd {sd.plan.key}")
        for sd in self.directions.values():
            sd.install()
        if lead == "auto":
            self._calibrate_lead()

    def _calibrate_lead(self, samples: int = 60) -> None:
        """Measure each userspace delay stage's own latency and release packets that early.

        With the configured delay but no jitter or loss, RTT from the probe host behind
        switch A to the far end of the link (two stage passes) minus RTT to the near end
        (the host stack, no stage) minus the configured delays is the cost of the two
        passes at this delay (waking up, the verdict, reinjection, timer wake-ups of ~2 ×
        delay sleeps); half of it is each direction's lead, at most 2 ms. Recorded in
        ``lead_us``; the link probes afterwards check the result with fresh samples.

        The lead is the *fastest* pass's cost (the minima of near and far samples taken
        alternately), never a typical one: a packet is released early only by however much
        its pass beats the fastest of the calibration's, so RTTs stay at or above the
        configured delay (a typical pass adds tens of µs). A 10th percentile, measured near
        then far, let a burst of hypervisor steal during the far samples inflate the lead
        to ~0.45 ms per pass: CI then saw 9.08 ms RTTs on a 10 ms link.
        """
        for wan in self.plan.wans:
            pair = [self.directions[wan.a_to_b.key], self.directions[wan.b_to_a.key]]
            if any(sd.daemon is None for sd in pair):
                continue
            for sd in pair:
                sd.apply_delay_only(DelaySettings(delay_ms=sd.shape.delay_ms), 0.0)
            ha = self.plan.probe_host(wan.a)
            src = Endpoint(ha.netns, ha.address)
            sw_a, sw_b = self.plan.switch(wan.a), self.plan.switch(wan.b)
            (near, _), (far, _) = measure_rtts(
                src,
                [Endpoint(sw_a.netns, wan.a_address), Endpoint(sw_b.netns, wan.b_address)],
                samples=samples,
            )
            configured = sum(sd.shape.delay_ms for sd in pair)
            lead_us = stage_lead_us(near, far, configured, passes=2)
            for sd in pair:
                sd.apply_delay_only(DelaySettings.from_shape(sd.shape, down=sd.down), lead_us)
                self.lead_us[sd.plan.key] = round(lead_us, 1)

    def _record_process(self, pid: int, netns: str, role: str) -> None:
        with self._lock:
            self.state.processes.append(
                ProcessRecord(pid=pid, netns=netns, role=role, start_ticks=process_start_ticks(pid))
            )
            self.state.save()

    def down(self) -> CleanupReport:
        """Stop every process in our namespaces, delete the namespaces and the state file."""
        if not self._is_up:
            return self.cleanup_report or CleanupReport()
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            for sd in self.directions.values():
                with contextlib.suppress(Exception):
                    sd.stop()
            for proc in self._procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
            deadline = time.monotonic() + 1.0
            for proc in self._procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            names = sorted(set(self.state.namespaces) | set(nsutil.list_netns(self.plan.prefix)))
            self.cleanup_report = remove_namespaces(names, [self.state])
            for proc in self._procs:
                with contextlib.suppress(Exception):
                    proc.wait(timeout=1.0)
            self._is_up = False
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return self.cleanup_report

    # --------------------------------------------------------------------- use
    def hosts(self) -> dict[str, HostInfo]:
        return {
            h.name: HostInfo(h.name, h.kind, h.site, h.netns, h.address)
            for h in self.plan.hosts
            if h.kind != "probe"
        }

    def address(self, instance: str) -> str:
        return self.plan.host(instance).address

    def netns(self, instance: str) -> str:
        return self.plan.host(instance).netns

    def spawn(
        self,
        instance: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
    ) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``instance``'s namespace (env added to ours); dies with us.

        The child's environment names the scenario's congestion control
        (``tcp.CONGESTION_ENV``) for the sockets it opens and, when cold-start compensation
        is in force, its WAN peers' real paths (``slowstart.COMPENSATION_ENV``)."""
        if not self._is_up:
            raise UserError("the topology is down")
        host = self.plan.host(instance)
        full_env = {**os.environ, CONGESTION_ENV: self.tcp.congestion, **(env or {})}
        comp = self.compensation(instance)
        if comp is not None:
            full_env[COMPENSATION_ENV] = comp.to_env()
        log: IO[Any] | None = None
        if log_path is not None:
            log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = nsutil.spawn(host.netns, argv, env=full_env, stdout=log, stderr=log)
        finally:
            if log is not None:
                log.close()
        self._procs.append(proc)
        self._record_process(proc.pid, host.netns, f"spawn {instance}")
        return proc

    def compensation(self, instance: str) -> Compensation | None:
        """Slow-start compensation for a sender in ``instance`` (None when not in force):
        the real path to every host at another site, by address."""
        if not self.tcp.cold_start_compensation:
            return None
        site = self.plan.host(instance).site
        by_site = wan_paths(self.config, site)
        paths = {h.address: by_site[h.site] for h in self.plan.hosts if h.site in by_site}
        return Compensation(
            self.plan.scale, self.config.tcp_slow_start_after_idle, paths, last_used={}
        )

    def apply_change(
        self,
        link: str,
        changes: LinkChange | Mapping[str, Any],
        direction: ChangeDirection = "both",
    ) -> list[ChangeRecord]:
        """Change a link now (rates are configured values, scaled here); returns the records."""
        change = changes if isinstance(changes, LinkChange) else LinkChange(**changes)
        wan = self.plan.wan(link)
        records = []
        for name in change_directions(direction):
            d = wan.a_to_b if name == "a_to_b" else wan.b_to_a
            sd = self.directions[d.key]
            shape, down = change.applied(sd.shape, sd.down, scale=self.plan.scale)
            if sd.backend == "kernel" and shape.jitter_ms > 0 and shape.jitter_dist != "uniform":
                raise UserError(f"{d.key} uses netem, which cannot take normal jitter here")
            sd.apply(shape, down)
            record = ChangeRecord(
                link=link,
                direction=d.direction,
                changes=change.model_dump(exclude_none=True),
                backend=sd.backend,
                t_unix=time.time(),
                t_mono=time.monotonic(),
                rate_mbit=None if shape.rate_mbit is None else shape.rate_mbit * self.plan.scale,
                delay_ms=shape.delay_ms,
                jitter_ms=shape.jitter_ms,
                loss_pct=shape.loss_pct,
                up=not down,
            )
            records.append(record)
        with self._lock:
            self.changes.extend(records)
        return records

    def run_schedule(self, schedule: Schedule, t0: float | None = None) -> ScheduleRunner:
        """Apply ``schedule`` in the background, offsets from ``t0`` (monotonic, default now)."""
        return ScheduleRunner(schedule, self.apply_change, t0).start()

    def start_wan_schedule(self, t0: float | None = None) -> WanScheduleRun | None:
        """Start the configured ``[network.schedule]`` (None when there is none)."""
        from pddbench.netem.wanrun import WanScheduleRun

        if self.config.schedule.empty:
            return None
        return WanScheduleRun(self, time.monotonic() if t0 is None else t0)

    def wan_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes each shaped WAN direction has carried so far, by traffic class
        (:meth:`ShapedDirection.class_bytes`), keyed like :attr:`directions`."""
        return {key: sd.class_bytes() for key, sd in self.directions.items()}

    def initial_records(self, t0: float) -> list[ChangeRecord]:
        """Each WAN direction's state at ``t0``: the first row of its timeline."""
        out = []
        for key, sd in self.directions.items():
            link, _, direction = key.partition(":")
            shape = sd.shape
            out.append(
                ChangeRecord(
                    link=link,
                    direction=direction,
                    changes={},
                    backend=sd.backend,
                    t_unix=time.time() - (time.monotonic() - t0),
                    t_mono=t0,
                    at_s=0.0,
                    rate_mbit=None
                    if shape.rate_mbit is None
                    else shape.rate_mbit * self.plan.scale,
                    delay_ms=shape.delay_ms,
                    jitter_ms=shape.jitter_ms,
                    loss_pct=shape.loss_pct,
                    up=not sd.down,
                )
            )
        return out

    def probe(
        self,
        links: Sequence[str] | None = None,
        *,
        samples: int = 200,
        bulk_seconds: float = 2.0,
        congestion: str | None = None,
    ) -> list[LinkProbe]:
        """Measure each link's RTT distribution and, if ``bulk_seconds`` > 0, TCP goodput."""
        out = []
        for wan in self.plan.wans:
            if links is not None and wan.name not in links:
                continue
            fwd, back = self.directions[wan.a_to_b.key], self.directions[wan.b_to_a.key]
            a, b, a_end, b_end = self.probe_endpoints(wan.name)
            worst = 2 * (fwd.shape.delay_ms + back.shape.delay_ms)
            rtts, lost = measure_rtt(a, b_end, samples=samples, timeout_s=0.2 + worst / 1000)
            summary = summarize_rtt(rtts, lost)
            exp50, exp99 = expected_rtt(
                DelaySettings.from_shape(fwd.shape), DelaySettings.from_shape(back.shape)
            )
            good_ab = good_ba = None
            tries_ab = tries_ba = 0
            cc = congestion or self.probe_congestion()
            if bulk_seconds > 0:
                good_ab, tries_ab = best_goodput(
                    a, b_end, fwd.shape.rate_mbit, fwd.shape.loss_pct, bulk_seconds, cc
                )
                good_ba, tries_ba = best_goodput(
                    b, a_end, back.shape.rate_mbit, back.shape.loss_pct, bulk_seconds, cc
                )
            out.append(
                LinkProbe(
                    run_id=self.run_id,
                    link=wan.name,
                    a=wan.a,
                    b=wan.b,
                    scale=self.plan.scale,
                    backend_a_to_b=fwd.backend,
                    backend_b_to_a=back.backend,
                    qos=fwd.shape.qos,
                    **summary.probe_fields(),  # type: ignore[arg-type]
                    expected_rtt_p50_ms=exp50,
                    expected_rtt_p99_ms=exp99,
                    rate_a_to_b_mbit=fwd.shape.rate_mbit,
                    rate_b_to_a_mbit=back.shape.rate_mbit,
                    goodput_a_to_b_mbit=None if good_ab is None else good_ab.mbit_steady,
                    goodput_b_to_a_mbit=None if good_ba is None else good_ba.mbit_steady,
                    loss_a_to_b_pct=fwd.shape.loss_pct,
                    loss_b_to_a_pct=back.shape.loss_pct,
                    goodput_congestion=cc if bulk_seconds > 0 else "",
                    goodput_steal_pct=max(
                        (g.steal_pct for g in (good_ab, good_ba) if g is not None), default=0.0
                    ),
                    goodput_attempts=tries_ab + tries_ba,
                )
            )
        return out

    def probe_endpoints(self, link: str) -> tuple[Endpoint, Endpoint, Endpoint, Endpoint]:
        """(site a's probe host, site b's, a's end of the link, b's end): a → b_end and
        b → a_end cross exactly this link, with forwarded (not locally sent) traffic."""
        wan = self.plan.wan(link)
        ha, hb = self.plan.probe_host(wan.a), self.plan.probe_host(wan.b)
        a, b = Endpoint(ha.netns, ha.address), Endpoint(hb.netns, hb.address)
        a_end = Endpoint(self.plan.switch(wan.a).netns, wan.a_address)
        b_end = Endpoint(self.plan.switch(wan.b).netns, wan.b_address)
        return a, b, a_end, b_end

    def probe_congestion(self) -> str:
        """BBR for the goodput check where the kernel has it: the check asks whether the
        *link* carries its rate, and BBR measures the bottleneck in a second or two, where a
        CUBIC flow at a 30 ms RTT is often still recovering from slow start's overshoot
        (measured here: 130-480 of 500 Mbit/s over 2 s). Recorded with each probe."""
        available = self.tcp.values.get("net.ipv4.tcp_available_congestion_control", "")
        return "bbr" if "bbr" in available.split() else self.tcp.congestion

    def report(self) -> TopologyReport:
        assert self.caps is not None
        return TopologyReport(
            run_id=self.run_id,
            scale=self.plan.scale,
            netem_available=self.caps.netem,
            netem_probe=self.caps.netem_probe,
            backends={k: f"{sd.backend} ({sd.reason})" for k, sd in self.directions.items()},
            daemons={k: sd.daemon.info for k, sd in self.directions.items() if sd.daemon},
            tcp=self.tcp,
            lead_us=dict(self.lead_us),
            notes=list(self.notes),
        )
