"""The router's shared state and the inputs of its decisions (sans-IO).

Owns what every per-request flow (:mod:`~pddbench.servers.flow_core`) reads and updates
on the router: the worker pools and their health, in-flight loads and KV promised per
instance (a relay's room), P's predicted prefill backlog, the affinity index (approximate
prefix caches), the WAN link estimators per datacenter pair, and instance selection
(:func:`~pddbench.servers.routing.choose_instance` over the healthy, roomy pool).

Both drivers hold one: the asyncio router (:mod:`~pddbench.servers.router`) and the
virtual-time twin (:mod:`pddbench.twin`). Must not do I/O or read clocks; the decisions
themselves live in :mod:`~pddbench.servers.routing`.
"""

from __future__ import annotations

from collections.abc import Hashable

from pddbench.servers.compute import Machine, prefill_seconds
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role
from pddbench.servers.routing import AffinityIndex, LinkEstimator, choose_instance


class RequestFailed(Exception):
    """The request cannot complete; the message is for the client."""


class RouterCore:
    """Pools, loads, backlog, affinity and link estimates of one router."""

    def __init__(self, dep: DeploymentConfig) -> None:
        self.dep = dep
        self.model = dep.machine(next(i for i in dep.instances if i.role is not Role.ROUTER)).model
        self.routing_policy = dep.routing.policy()
        self.selection = dep.routing.selection()
        workers = [i for i in dep.instances if i.role is not Role.ROUTER]
        self.workers = workers
        self.loads: dict[str, float] = {i.id: 0.0 for i in workers}
        self.held_tokens: dict[str, int] = {i.id: 0 for i in workers}  # KV promised, per instance
        self.prefill_backlog_s: dict[str, float] = {i.id: 0.0 for i in workers}  # P's queue
        # nothing is routable before the driver says so (first probe, connected channel)
        self.healthy: dict[str, bool] = {i.id: False for i in workers}
        self.flows_by_instance: dict[str, set[Hashable]] = {i.id: set() for i in workers}
        self.capacity = {i.id: dep.capacity_tokens(i) for i in workers}
        self.affinity = AffinityIndex({k: v // dep.block_size for k, v in self.capacity.items()})
        self.links: dict[tuple[str, str], LinkEstimator] = {}
        self._machines: dict[str, Machine] = {}  # by instance id: its rates worked out once

    # -- health ---------------------------------------------------------------------------
    def set_healthy(self, instance_id: str, up: bool) -> bool:
        """Record an instance's health; True when it flipped. Down forgets its affinity."""
        flipped = self.healthy[instance_id] != up
        self.healthy[instance_id] = up
        if not up:
            self.affinity.forget(instance_id)
        return flipped

    def has_healthy(self, role: Role) -> bool:
        return any(self.healthy[i.id] for i in self.dep.by_role(role))

    # -- selection ------------------------------------------------------------------------
    def choose(
        self, role: Role, hashes: list[int], need_tokens: int = 0
    ) -> tuple[InstanceConfig, int]:
        """A healthy instance of ``role`` for this prompt (with ``need_tokens`` of KV room, when
        one has it), and its believed cached blocks."""
        pool = [i for i in self.dep.by_role(role) if self.healthy[i.id]]
        if not pool:
            raise RequestFailed(f"no healthy {role.value} instance")
        roomy = [i for i in pool if self.room(i.id) >= need_tokens]
        pool = roomy or pool
        loads = {i.id: self.loads[i.id] for i in pool}
        matched = {i.id: self.affinity.match(i.id, hashes) for i in pool}
        chosen = choose_instance(loads, matched, len(hashes), self.selection)
        return self.dep.instance(chosen), matched[chosen]

    def affinity_insert(self, instance_id: str, hashes: list[int]) -> None:
        self.affinity.insert(instance_id, hashes)

    def link(self, src: InstanceConfig, dst: InstanceConfig) -> LinkEstimator:
        key = (src.datacenter, dst.datacenter)
        est = self.links.get(key)
        if est is None:
            r = self.dep.routing
            line = r.wan_bandwidth_gbps * 1e9 / 8  # the configured line: prior and ceiling
            est = LinkEstimator(
                line, measured=r.bandwidth_source == "measured", ceiling_bytes_per_s=line
            )
            self.links[key] = est
        return est

    def predict_prefill_s(self, p: InstanceConfig, cached_blocks: int, prompt_len: int) -> float:
        cached = min(cached_blocks * self.dep.block_size, prompt_len - 1)
        sched = self.dep.scheduler_for(p)
        m = self._machines.get(p.id)
        if m is None:
            m = self._machines[p.id] = self.dep.machine(p)
        return prefill_seconds(m, prompt_len - cached, cached, sched.chunk_tokens)

    # -- accounting -----------------------------------------------------------------------
    def hold(self, instance_id: str, flow: Hashable, tokens: int = 0) -> None:
        self.loads[instance_id] += 1
        self.held_tokens[instance_id] += tokens
        self.flows_by_instance[instance_id].add(flow)

    def unhold(self, instance_id: str, flow: Hashable, tokens: int = 0) -> None:
        self.loads[instance_id] -= 1
        self.held_tokens[instance_id] -= tokens
        self.flows_by_instance[instance_id].discard(flow)

    def room(self, instance_id: str) -> int:
        """KV tokens not yet promised to requests routed to this instance."""
        return self.capacity[instance_id] - self.held_tokens[instance_id]

    def relay_room(self) -> int | None:
        """KV room on the roomiest healthy relay (None when there is none)."""
        rooms = [self.room(i.id) for i in self.dep.by_role(Role.RELAY_DECODE) if self.healthy[i.id]]
        return max(rooms) if rooms else None

    def add_backlog(self, p_id: str, seconds: float) -> None:
        self.prefill_backlog_s[p_id] += seconds

    def settle_backlog(self, p_id: str, seconds: float) -> None:
        self.prefill_backlog_s[p_id] = max(0.0, self.prefill_backlog_s[p_id] - seconds)
