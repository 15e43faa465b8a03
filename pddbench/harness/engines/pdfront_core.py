"""The real-engine front door's state and decisions (:mod:`pddbench.harness.engines.pdfront`).

Owns the members (role, site, HTTP and KV node addresses), which are up, and each request's
choices: the instances (``choose_instance`` with the affinity index) and the pipeline
(``decide_pipeline`` with the WAN's link estimator) — the project's own decision code in
:mod:`pddbench.servers.routing`, called, not copied. No HTTP serving here.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import aiohttp

from pddbench.servers.clock import ClockAnchor
from pddbench.servers.routing import (
    AffinityIndex,
    LinkEstimator,
    Pipeline,
    PipelineInputs,
    PipelinePolicy,
    RoutingPolicy,
    SelectionPolicy,
    choose_instance,
    decide_pipeline,
)


class UpstreamError(Exception):
    """A member failed (refused, died, answered an error): the request fails, in one line."""


ROLES = ("P", "D", "RLD", "MD")
AFFINITY_BLOCKS = 1 << 16  # per instance: far above what the tiny model's cache holds
PROBE_S = 1.0  # how often a member that is down is asked for its /health


@dataclass(frozen=True)
class Member:
    """One engine behind the front door: its role, site, HTTP and KV node addresses."""

    role: str
    name: str
    site: str
    http: str  # host:port of its OpenAI server
    kv: str  # host:port of its KV node

    @classmethod
    def parse(cls, text: str) -> Member:
        """``ROLE:NAME:SITE:HTTPHOST:HTTPPORT:KVHOST:KVPORT``."""
        parts = text.split(":")
        if len(parts) != 7 or parts[0] not in ROLES:
            raise ValueError(f"bad --member {text!r} (want ROLE:NAME:SITE:HOST:PORT:KVHOST:KVPORT)")
        role, name, site, h, p, kh, kp = parts
        return cls(role, name, site, f"{h}:{p}", f"{kh}:{kp}")


@dataclass
class FrontConfig:
    mode: str  # "pd" | "pdd"
    members: list[Member]
    block: int = 128  # the engines' KV block (affinity and the decision's cached tokens)
    kv_bytes_per_token: float = 1024.0
    wan_mbit: float = 100.0  # the line's rate: the link estimator's prior and ceiling
    ttft_target_s: float = 1.0
    pipeline: PipelinePolicy = PipelinePolicy.HIT_RATE_AWARE
    wait_s: float = 30.0  # longest a decode side waits for a transfer before computing

    def of(self, role: str) -> list[Member]:
        return [m for m in self.members if m.role == role]


@dataclass
class _Prefill:
    """The front door's running estimate of P's seconds per computed prompt token."""

    per_token_s: float = 2e-4
    samples: int = 0

    def observe(self, seconds: float, computed: int) -> None:
        if computed >= 64:
            x = seconds / computed
            self.per_token_s = x if not self.samples else 0.8 * self.per_token_s + 0.2 * x
            self.samples += 1


@dataclass
class Front:
    cfg: FrontConfig
    anchor: ClockAnchor = field(default_factory=ClockAnchor.take)
    loads: dict[str, int] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    down: set[str] = field(default_factory=set)
    probes: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        names = {m.name: AFFINITY_BLOCKS for m in self.cfg.members}
        self.affinity = AffinityIndex(names)
        self.loads = {m.name: 0 for m in self.cfg.members}
        rate = self.cfg.wan_mbit * 1e6 / 8
        self.link = LinkEstimator(rate, ceiling_bytes_per_s=rate, min_bytes=256 * 1024)
        self.prefill = _Prefill()
        self.ids = itertools.count()
        self.session: aiohttp.ClientSession | None = None

    # -- choosing -------------------------------------------------------------------
    def up(self, role: str) -> list[Member]:
        """The members of ``role`` not marked down (a connection to one failed and its
        ``/health`` has not answered since)."""
        return [m for m in self.cfg.of(role) if m.name not in self.down]

    def mark_down(self, m: Member) -> None:
        """Leave ``m`` out until its ``/health`` answers again (probed, not tried with a
        request)."""
        if m.name not in self.down:
            self.down.add(m.name)
            task = asyncio.get_running_loop().create_task(self._probe(m))
            self.probes.add(task)
            task.add_done_callback(self.probes.discard)

    async def _probe(self, m: Member) -> None:
        assert self.session is not None
        while True:
            await asyncio.sleep(PROBE_S)
            try:
                timeout = aiohttp.ClientTimeout(total=2.0)
                async with self.session.get(f"http://{m.http}/health", timeout=timeout) as r:
                    if r.status == 200:
                        break
            except (aiohttp.ClientError, TimeoutError):
                continue
        self.down.discard(m.name)

    def pick(self, role: str, hashes: list[int]) -> tuple[Member, int]:
        # none up: try them anyway (a transient failure must not refuse every request
        # until the next probe; a role with no alternative has nothing better to do)
        members = {m.name: m for m in (self.up(role) or self.cfg.of(role))}
        if not members:
            raise UpstreamError(f"no {role} instance")
        loads = {n: float(self.loads[n]) for n in members}
        matched = {n: self.affinity.match(n, hashes) for n in members}
        name = choose_instance(loads, matched, len(hashes), SelectionPolicy())
        return members[name], matched[name]

    def decide(self, prompt_len: int, md_cached: int, relay: bool) -> Pipeline:
        if self.cfg.mode == "pd":
            return Pipeline.PD
        uncached = max(0, prompt_len - md_cached)
        inputs = PipelineInputs(
            prompt_len=prompt_len,
            md_cached_tokens=md_cached,
            kv_bytes_per_token=self.cfg.kv_bytes_per_token,
            predicted_prefill_s=uncached * self.prefill.per_token_s,
            link=self.link,
            relay_available=relay,
        )
        policy = RoutingPolicy(pipeline=self.cfg.pipeline, ttft_target_s=self.cfg.ttft_target_s)
        return decide_pipeline(inputs, policy).pipeline

    # -- HTTP ---------------------------------------------------------------------------
