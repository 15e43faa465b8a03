"""Names, addresses and routes of an emulated network, decided without touching the kernel.

``plan_topology(config, run_id)`` turns a :class:`NetworkConfig` into a frozen
:class:`TopologyPlan`: one namespace per site switch, instance and client, the veth and
bridge names inside them, addresses from 198.18.0.0/15, static routes (shortest path by
delay, so more than two sites is configuration, not code) and the effective (scaled)
shape of every link direction. Pure and deterministic; ``topology`` applies it.

Naming: every namespace is ``pddb<run_id>-<role>`` and every interface
``pddb<run_id><role>`` (at most 15 characters), so ``cleanup`` can find all debris by prefix.
Addresses: site *i* (0-based) owns 198.18.(i+1).0/24 (switch .1, probe host .9, instances and
clients from .10); WAN
link *k* owns the /30 at 198.19.(k // 64).((k % 64) * 4).
"""

from __future__ import annotations

import heapq
import ipaddress
import re
from dataclasses import dataclass, field

from pddbench.errors import UserError
from pddbench.netem.topology_config import Direction, NetworkConfig, Shape

PREFIX = "pddb"
EMULATED_NET = ipaddress.ip_network("198.18.0.0/15")
_RUN_ID = re.compile(r"^[a-z0-9]{1,6}$")


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise UserError(f"run id {run_id!r} must be 1-6 lowercase letters or digits")
    return run_id


def netns_prefix(run_id: str) -> str:
    """Every namespace of run ``run_id`` starts with this string."""
    return f"{PREFIX}{check_run_id(run_id)}-"


@dataclass(frozen=True)
class HostPlan:
    """An instance or client namespace attached to its site's bridge."""

    name: str
    kind: str  # "instance" | "client" | "probe"
    site: str
    netns: str
    ifname: str  # inside the host namespace
    port_ifname: str  # the switch-side end, enslaved to the bridge
    address: str
    prefix_len: int
    gateway: str


@dataclass(frozen=True)
class RoutePlan:
    dst: str  # CIDR
    gateway: str


@dataclass(frozen=True)
class SwitchPlan:
    """A site switch: a namespace with a bridge and the WAN ends of the site's links."""

    site: str
    netns: str
    bridge: str
    address: str
    subnet: str
    routes: tuple[RoutePlan, ...]


@dataclass(frozen=True)
class DirectionPlan:
    """One direction of a WAN link, shaped on the egress of the sending switch."""

    link: str
    direction: Direction
    src_site: str
    dst_site: str
    netns: str  # the sending switch namespace
    ifname: str  # egress interface inside ``netns``
    queue_num: int  # NFQUEUE number, unique inside ``netns``
    configured: Shape  # as written in the scenario
    shape: Shape  # effective: rate divided by the scale factor

    @property
    def key(self) -> str:
        return f"{self.link}:{self.direction}"


@dataclass(frozen=True)
class WanPlan:
    name: str
    index: int
    a: str
    b: str
    a_ifname: str
    b_ifname: str
    a_address: str
    b_address: str
    prefix_len: int
    a_to_b: DirectionPlan
    b_to_a: DirectionPlan


@dataclass(frozen=True)
class SegmentPlan:
    """The intra-site segment shaping of one host port (both directions)."""

    host: str
    rate_mbit: float | None  # effective (scaled)
    delay_us: float


@dataclass(frozen=True)
class TopologyPlan:
    run_id: str
    scale: float
    switches: tuple[SwitchPlan, ...]
    hosts: tuple[HostPlan, ...]
    wans: tuple[WanPlan, ...]
    segments: tuple[SegmentPlan, ...]
    tcp_buffer_bytes: int
    extras: dict[str, str] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return netns_prefix(self.run_id)

    def namespaces(self) -> list[str]:
        return [s.netns for s in self.switches] + [h.netns for h in self.hosts]

    def directions(self) -> list[DirectionPlan]:
        return [d for w in self.wans for d in (w.a_to_b, w.b_to_a)]

    def probe_host(self, site: str) -> HostPlan:
        return self.host(probe_host_name(site))

    def host(self, name: str) -> HostPlan:
        for h in self.hosts:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hosts if h.kind != "probe")
        raise UserError(f"unknown instance {name!r} (known: {known})")

    def switch(self, site: str) -> SwitchPlan:
        for s in self.switches:
            if s.site == site:
                return s
        raise UserError(f"unknown site {site!r}")

    def wan(self, link: str) -> WanPlan:
        for w in self.wans:
            if w.name == link:
                return w
        known = ", ".join(w.name for w in self.wans)
        raise UserError(f"unknown link {link!r} (known: {known})")


def probe_host_name(site: str) -> str:
    """The hidden host that ``probe`` measures a site's links from (not a valid user name)."""
    return f"_probe-{site}"


def scaled(shape: Shape, scale: float) -> Shape:
    """The shape with its rate divided by ``scale`` (delays stay real)."""
    if shape.rate_mbit is None or scale == 1.0:
        return shape
    return shape.model_copy(update={"rate_mbit": shape.rate_mbit / scale})


def plan_topology(config: NetworkConfig, run_id: str) -> TopologyPlan:
    """Decide every name, address, route and effective shape of ``config``."""
    ns_prefix = netns_prefix(run_id)
    if_prefix = f"{PREFIX}{run_id}"
    site_index = {s.name: i for i, s in enumerate(config.sites)}

    hosts: list[HostPlan] = []
    segments: list[SegmentPlan] = []
    port = 0
    for site in config.sites:
        i = site_index[site.name]
        subnet = ipaddress.ip_network(f"198.18.{i + 1}.0/24")
        gateway = str(subnet.network_address + 1)
        # The probe host measures the site's links from behind the switch, as real traffic
        # flows (a socket in the switch namespace itself would be throttled by TCP small
        # queues while the delay stage holds its packets).
        members = (
            [(probe_host_name(site.name), "probe")]
            + [(n, "instance") for n in site.instances]
            + [(c.name, "client") for c in config.effective_clients() if c.site == site.name]
        )
        seg = config.segment_of(site)
        for slot, (name, kind) in enumerate(members):
            role = {"instance": "i", "client": "c", "probe": "x"}[kind]
            netns = f"{ns_prefix}x-{site.name}" if kind == "probe" else f"{ns_prefix}{role}-{name}"
            hosts.append(
                HostPlan(
                    name=name,
                    kind=kind,
                    site=site.name,
                    netns=netns,
                    ifname=f"{if_prefix}e{port}",
                    port_ifname=f"{if_prefix}p{port}",
                    address=str(subnet.network_address + 9 + slot),
                    prefix_len=24,
                    gateway=gateway,
                )
            )
            rate = None if seg.rate_mbit is None else seg.rate_mbit / config.scale
            segments.append(SegmentPlan(host=name, rate_mbit=rate, delay_us=seg.delay_us))
            port += 1

    wans: list[WanPlan] = []
    queue_counter: dict[str, int] = {}

    def next_queue(site: str) -> int:
        n = queue_counter.get(site, 0)
        queue_counter[site] = n + 1
        return n

    for k, link in enumerate(config.links):
        net = ipaddress.ip_network(f"198.19.{k // 64}.{(k % 64) * 4}/30")
        a_if, b_if = f"{if_prefix}w{k}a", f"{if_prefix}w{k}b"
        dirs = {}
        for direction, src, dst, ifname in (
            ("a_to_b", link.a, link.b, a_if),
            ("b_to_a", link.b, link.a, b_if),
        ):
            configured = link.shape(direction)  # type: ignore[arg-type]
            dirs[direction] = DirectionPlan(
                link=link.link_name,
                direction=direction,  # type: ignore[arg-type]
                src_site=src,
                dst_site=dst,
                netns=f"{ns_prefix}s-{src}",
                ifname=ifname,
                queue_num=next_queue(src),
                configured=configured,
                shape=scaled(configured, config.scale),
            )
        wans.append(
            WanPlan(
                name=link.link_name,
                index=k,
                a=link.a,
                b=link.b,
                a_ifname=a_if,
                b_ifname=b_if,
                a_address=str(net.network_address + 1),
                b_address=str(net.network_address + 2),
                prefix_len=30,
                a_to_b=dirs["a_to_b"],
                b_to_a=dirs["b_to_a"],
            )
        )

    switches: list[SwitchPlan] = []
    for site in config.sites:
        i = site_index[site.name]
        subnet = ipaddress.ip_network(f"198.18.{i + 1}.0/24")
        routes = [
            RoutePlan(dst=f"198.18.{site_index[dst] + 1}.0/24", gateway=gw)
            for dst, gw in _next_hops(site.name, config.sites, wans)
        ]
        # A neighbour's probe host is always reached over the direct link, so that a probe
        # of link (a, b) crosses that link both ways whatever the shortest paths are.
        for w in wans:
            if site.name in (w.a, w.b):
                other, gw = (w.b, w.b_address) if w.a == site.name else (w.a, w.a_address)
                probe = next(h for h in hosts if h.kind == "probe" and h.site == other)
                routes.append(RoutePlan(dst=f"{probe.address}/32", gateway=gw))
        switches.append(
            SwitchPlan(
                site=site.name,
                netns=f"{ns_prefix}s-{site.name}",
                bridge=f"{if_prefix}b{i}",
                address=str(subnet.network_address + 1),
                subnet=str(subnet),
                routes=tuple(routes),
            )
        )
    for name in [s.netns for s in switches] + [h.netns for h in hosts]:
        if len(name) > 200:
            raise UserError(f"namespace name {name!r} is too long")
    return TopologyPlan(
        run_id=run_id,
        scale=config.scale,
        switches=tuple(switches),
        hosts=tuple(hosts),
        wans=tuple(wans),
        segments=tuple(segments),
        tcp_buffer_bytes=config.tcp_buffer_bytes,
    )


def _next_hops(source: str, sites: list, wans: list[WanPlan]) -> list[tuple[str, str]]:
    """(destination site, gateway address) for every other site, by least total delay."""
    # Adjacency: site -> list of (neighbour, weight, gateway address of the neighbour).
    adjacency: dict[str, list[tuple[str, float, str]]] = {s.name: [] for s in sites}
    for w in wans:
        weight = max(w.a_to_b.shape.delay_ms, w.b_to_a.shape.delay_ms) + 1e-3  # hop cost
        adjacency[w.a].append((w.b, weight, w.b_address))
        adjacency[w.b].append((w.a, weight, w.a_address))
    best: dict[str, tuple[float, str]] = {}  # site -> (distance, first-hop gateway)
    heap: list[tuple[float, str, str]] = [(0.0, source, "")]
    while heap:
        dist, site, first_gw = heapq.heappop(heap)
        if site in best:
            continue
        best[site] = (dist, first_gw)
        for nxt, weight, gw in sorted(adjacency[site]):
            if nxt not in best:
                heapq.heappush(heap, (dist + weight, nxt, first_gw or gw))
    return [(s.name, best[s.name][1]) for s in sites if s.name != source and s.name in best]
