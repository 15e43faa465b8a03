"""The emulated network as validated configuration: sites, instances, WAN links, scale.

This module owns the pydantic models a scenario's ``[network]`` table is parsed into and
their validation (one clear message per problem). It does no I/O and knows nothing of
namespaces; ``plan`` turns a :class:`NetworkConfig` into names and addresses.

Units: rates in Mbit/s (as configured, before scaling), delays and jitter in ms (one way,
per direction), intra-site delay in µs, loss in percent, queue limits in packets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

JitterDist = Literal["uniform", "normal"]
Backend = Literal["auto", "kernel", "nfqueue"]
Direction = Literal["a_to_b", "b_to_a"]
ChangeDirection = Literal["both", "a_to_b", "b_to_a"]
Qos = Literal["priority", "fifo"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def _check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{what} name {value!r} must be 1-40 characters of letters, digits, '_', '.', '-'"
            " starting with a letter or digit"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shape(_Model):
    """How one direction of a link behaves (effective values, before scaling)."""

    rate_mbit: float | None = Field(default=None, gt=0)
    delay_ms: float = Field(default=0.0, ge=0, le=10_000)
    jitter_ms: float = Field(default=0.0, ge=0, le=10_000)
    jitter_dist: JitterDist = "uniform"
    loss_pct: float = Field(default=0.0, ge=0, le=100)
    limit_pkts: int | None = Field(default=None, gt=0)
    # "priority": bulk (DSCP-marked KV) and control traffic in two classes, control first
    # (see pddbench.netem.qos); "fifo": one queue for everything.
    qos: Qos = "fifo"


class ShapeOverride(_Model):
    """Per-direction override of a link's shared settings; unset fields inherit."""

    rate_mbit: float | None = Field(default=None, gt=0)
    delay_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_dist: JitterDist | None = None
    loss_pct: float | None = Field(default=None, ge=0, le=100)
    limit_pkts: int | None = Field(default=None, gt=0)


class LinkConfig(Shape):
    """A WAN link between two sites: a :class:`Shape` shared by both directions (priority
    queueing by default), with per-direction overrides."""

    a: str
    b: str
    name: str | None = None
    qos: Qos = "priority"
    a_to_b: ShapeOverride | None = None
    b_to_a: ShapeOverride | None = None

    @property
    def link_name(self) -> str:
        return self.name or f"{self.a}-{self.b}"

    def shape(self, direction: Direction) -> Shape:
        """The effective shape of one direction (shared settings + override)."""
        base = self.model_dump(include=set(Shape.model_fields))
        override = self.a_to_b if direction == "a_to_b" else self.b_to_a
        if override is not None:
            base.update(override.model_dump(exclude_none=True))
        return Shape(**base)


class SegmentConfig(_Model):
    """The intra-site (RDMA-like) segment between an instance and its site switch."""

    rate_mbit: float | None = Field(default=None, gt=0)
    delay_us: float = Field(default=0.0, ge=0, le=100_000)


class SiteConfig(_Model):
    """A datacenter: a switch and the instances attached to it."""

    name: str
    instances: list[str] = Field(default_factory=list)
    segment: SegmentConfig | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "site")

    @field_validator("instances")
    @classmethod
    def _instances(cls, v: list[str]) -> list[str]:
        for name in v:
            _check_name(name, "instance")
        return v


class ClientConfig(_Model):
    """A load-generator namespace attached to a site's switch."""

    name: str = "client"
    site: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "client")


class LinkChange(BaseModel):
    """Fields to change on a link direction; unset fields keep their current value.

    Rates are configured (unscaled) values; the topology's scale factor applies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_mbit: float | None = Field(default=None, gt=0)
    delay_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_dist: JitterDist | None = None
    loss_pct: float | None = Field(default=None, ge=0, le=100)
    up: bool | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> LinkChange:
        if not self.model_dump(exclude_none=True):
            raise ValueError("a link change must change at least one field")
        return self

    def applied(self, shape: Shape, down: bool, *, scale: float = 1.0) -> tuple[Shape, bool]:
        """A direction's (shape, down) after this change; ``scale`` divides the new rate (the
        emulated topology's scaled shapes; the twin's are at scale 1). The one place the
        schedule's state rule lives: the topology and the twin's link model both step by it."""
        update = self.model_dump(exclude_none=True, exclude={"up"})
        if "rate_mbit" in update:
            update["rate_mbit"] = update["rate_mbit"] / scale
        return shape.model_copy(update=update), down if self.up is None else not self.up


def change_directions(direction: ChangeDirection) -> list[Direction]:
    """The directions a change names (``both``: each)."""
    return ["a_to_b", "b_to_a"] if direction == "both" else [direction]


class ScheduledChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    link: str
    direction: ChangeDirection = "both"
    changes: LinkChange


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[ScheduledChange] = Field(default_factory=list)

    def ordered(self) -> list[ScheduledChange]:
        return sorted(self.events, key=lambda e: e.at_s)


class RateSwing(_Model):
    """Periodic drops of a link's rate to a fraction of its line rate (E12's "1-20 s swings").

    ``count`` drops, the first at ``start_s``, one every ``every_s``; each lasts ``duration_s``
    and then the configured rate returns."""

    link: str
    direction: ChangeDirection = "both"
    start_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    fraction: float = Field(gt=0, lt=1)
    every_s: float | None = Field(default=None, gt=0)
    count: int = Field(default=1, ge=1, le=10_000)

    @model_validator(mode="after")
    def _period(self) -> RateSwing:
        if self.count > 1 and (self.every_s is None or self.every_s <= self.duration_s):
            raise ValueError("a repeated swing needs every_s longer than duration_s")
        return self


class CrossTraffic(_Model):
    """A competing bulk TCP flow on a link direction, between the sites' probe hosts;
    ``rate_mbit`` (configured units, scaled) paces it, none = as fast as it gets."""

    link: str
    direction: Direction = "a_to_b"
    start_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)
    rate_mbit: float | None = Field(default=None, gt=0)


class WanSchedule(_Model):
    """``[network.schedule]``: what happens to the links while a replay runs."""

    events: list[ScheduledChange] = Field(default_factory=list)
    swings: list[RateSwing] = Field(default_factory=list)
    cross_traffic: list[CrossTraffic] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.events or self.swings or self.cross_traffic)

    def links(self) -> set[str]:
        return {e.link for e in [*self.events, *self.swings, *self.cross_traffic]}

    def expand(self, line_rates: dict[tuple[str, Direction], float | None]) -> Schedule:
        """Events and swings as one schedule; ``line_rates``: each direction's configured rate."""
        events = list(self.events)
        for sw in self.swings:
            for d in change_directions(sw.direction):
                rate = line_rates[(sw.link, d)]
                if rate is None:
                    raise ValueError(f"swing on {sw.link!r}: the link has no rate to swing")
                for k in range(sw.count):
                    t = sw.start_s + k * (sw.every_s or 0.0)
                    low = LinkChange(rate_mbit=rate * sw.fraction)
                    events.append(ScheduledChange(at_s=t, link=sw.link, direction=d, changes=low))
                    back = LinkChange(rate_mbit=rate)
                    events.append(
                        ScheduledChange(
                            at_s=t + sw.duration_s, link=sw.link, direction=d, changes=back
                        )
                    )
        return Schedule(events=events)


class NetworkConfig(_Model):
    """The whole emulated network: the ``[network]`` table of a scenario."""

    sites: list[SiteConfig] = Field(min_length=1, max_length=250)
    links: list[LinkConfig] = Field(default_factory=list, max_length=1024)
    segment: SegmentConfig = SegmentConfig()
    clients: list[ClientConfig] = Field(default_factory=list)
    scale: float = Field(default=1.0, gt=0, le=1_000_000)
    backend: Backend = "auto"
    tcp_buffer_bytes: int = Field(default=64 * 1024 * 1024, ge=1 << 20, le=1 << 30)
    # TCP of the emulated hosts (see pddbench.netem.tcp for why these defaults):
    tcp_congestion: str = Field(default="auto", pattern=r"^[a-z0-9_]{1,15}$")  # auto: BBR if any
    tcp_slow_start_after_idle: bool = False
    # scaled runs: cold KV connections wait the slow-start time scaling removes
    # (pddbench.netem.slowstart; see pddbench.netem.tcp for the default)
    cold_start_compensation: bool = True
    schedule: WanSchedule = WanSchedule()
    # Userspace delay stage only: release packets this early to offset its own latency
    # (wake-up on a queued packet + verdict + reinjection; ~150-300 µs per pass on a 2-vCPU
    # VM). "auto": measured on each link when the network comes up (``topology``).
    nfqueue_lead_us: float | Literal["auto"] = "auto"

    @field_validator("nfqueue_lead_us")
    @classmethod
    def _lead(cls, v: float | str) -> float | str:
        if v != "auto" and not 0 <= float(v) <= 5_000:
            raise ValueError("nfqueue_lead_us must be 'auto' or 0-5000 µs")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> NetworkConfig:
        site_names = [s.name for s in self.sites]
        _no_duplicates(site_names, "site")
        hosts = [i for s in self.sites for i in s.instances] + [c.name for c in self.clients]
        _no_duplicates(hosts, "instance/client")
        for site in self.sites:
            if len(site.instances) + sum(c.site == site.name for c in self.clients) > 240:
                raise ValueError(f"site {site.name!r} has more than 240 instances and clients")
        known = set(site_names)
        for c in self.clients:
            if c.site not in known:
                raise ValueError(f"client {c.name!r} is placed at unknown site {c.site!r}")
        pairs: set[frozenset[str]] = set()
        for link in self.links:
            for end in (link.a, link.b):
                if end not in known:
                    raise ValueError(f"link {link.link_name!r} names unknown site {end!r}")
            if link.a == link.b:
                raise ValueError(f"link {link.link_name!r} connects site {link.a!r} to itself")
            pair = frozenset((link.a, link.b))
            if pair in pairs:
                raise ValueError(f"sites {link.a!r} and {link.b!r} are linked twice")
            pairs.add(pair)
        _no_duplicates([lk.link_name for lk in self.links], "link")
        names = {lk.link_name for lk in self.links}
        for name in sorted(self.schedule.links() - names):
            raise ValueError(f"[network.schedule] names unknown link {name!r}")
        unreachable = _unreachable_sites(site_names, self.links)
        if unreachable:
            raise ValueError(f"sites not connected to {site_names[0]!r}: {sorted(unreachable)}")
        return self

    def auto_scale(self, backend: str) -> tuple[float, str]:
        """(scale, reason): the smallest scale at which ``backend`` carries every WAN link."""
        from pddbench.netem.scale import choose_scale

        wan = [r for link, d in self.iter_directions() for r in [link.shape(d).rate_mbit] if r]
        segments = [self.segment, *(s.segment for s in self.sites)]
        seg_rates = [g.rate_mbit for g in segments if g is not None and g.rate_mbit]
        choice = choose_scale(wan, seg_rates, backend)
        return choice.scale, choice.reason

    def schedule_plan(self) -> Schedule:
        """``schedule`` expanded into timed link changes (swings: drops and returns)."""
        rates = {(lk.link_name, d): lk.shape(d).rate_mbit for lk, d in self.iter_directions()}
        return self.schedule.expand(rates)

    def effective_clients(self) -> list[ClientConfig]:
        """The configured clients, or one client named ``client`` at the first site."""
        return list(self.clients) or [ClientConfig(name="client", site=self.sites[0].name)]

    def segment_of(self, site: SiteConfig) -> SegmentConfig:
        return site.segment or self.segment

    def link(self, name: str) -> LinkConfig:
        for link in self.links:
            if link.link_name == name:
                return link
        raise KeyError(name)

    def iter_directions(self) -> Iterator[tuple[LinkConfig, Direction]]:
        for link in self.links:
            yield link, "a_to_b"
            yield link, "b_to_a"

    def between(self, src: str, dst: str) -> tuple[LinkConfig, Direction] | None:
        """The link and direction that carry traffic from site ``src`` to site ``dst``
        (None: no link joins them directly)."""
        for link in self.links:
            if (src, dst) == (link.a, link.b):
                return link, "a_to_b"
            if (src, dst) == (link.b, link.a):
                return link, "b_to_a"
        return None


def _no_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"duplicate {what} name {n!r}")
        seen.add(n)


def _unreachable_sites(sites: list[str], links: list[LinkConfig]) -> set[str]:
    adjacency: dict[str, set[str]] = {s: set() for s in sites}
    for link in links:
        adjacency[link.a].add(link.b)
        adjacency[link.b].add(link.a)
    seen = {sites[0]}
    stack = [sites[0]]
    while stack:
        for nxt in adjacency[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return set(sites) - seen
