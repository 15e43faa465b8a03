"""Priming an idle deployment's prefix caches with what a history left there (sans-IO).

Owns the one decision both drivers apply (the twin in process, the asyncio router behind
its ``/internal/prime`` endpoint): for each prefix, the instances whose caches hold it —
the ones the router sends a prompt with that prefix to. Per role on the request's path
(colocated: C; PD: P and D; PDD: P and MD) the router's own selection rule
(:func:`~pddbench.servers.routing.choose_instance`, cache-aware through the router's
:class:`~pddbench.servers.routing.AffinityIndex`) picks among the role's healthy
instances that keep a prefix cache, with the prefixes placed so far as their load (an
idle deployment has none: the sessions of a history were spread by load as they
arrived). The affinity index learns each placement as a routed request's prefill teaches
it. A relay-decode instance is left cold: whether a request is relayed is decided per
request, under load.

Prefixes come earliest needed first; a role takes them until its instances' KV capacity is
full (what does not fit would be evicted by what is needed sooner). The placements are
returned latest needed first, the order to insert them in (each instance's
:meth:`~pddbench.servers.radix.KvPool.prime`), so the earliest needed are the most recently
used. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pddbench.servers.config import Architecture, Role
from pddbench.servers.router_core import RouterCore
from pddbench.servers.routing import choose_instance

ROLES: dict[Architecture, tuple[Role, ...]] = {
    Architecture.COLOCATED: (Role.COLOCATED,),
    Architecture.PD: (Role.PREFILL, Role.DECODE),
    Architecture.PDD: (Role.PREFILL, Role.MAIN_DECODE),
}


@dataclass(frozen=True)
class Placement:
    """Instance ``instance_id`` holds the prefix ``hashes`` (its server block hashes)."""

    instance_id: str
    hashes: list[int]


def place(core: RouterCore, prefixes: Sequence[list[int]]) -> list[Placement]:
    """Where each prefix (earliest needed first) lands; latest needed first (see module)."""
    dep = core.dep
    out: list[Placement] = []
    for role in ROLES[dep.architecture]:
        pool = [i.id for i in dep.by_role(role) if core.healthy[i.id] and i.prefix_cache]
        if not pool:
            continue
        room = sum(core.capacity[i] for i in pool) // dep.block_size  # blocks
        placed = {i: 0.0 for i in pool}
        for hashes in prefixes:
            if not hashes:
                continue
            matched = {i: core.affinity.match(i, hashes) for i in pool}
            chosen = choose_instance(placed, matched, len(hashes), core.selection)
            new = len(hashes) - matched[chosen]
            if new > room:
                break
            room -= new
            placed[chosen] += 1
            core.affinity_insert(chosen, hashes)
            out.append(Placement(chosen, hashes))
    out.reverse()
    for p in out:  # the affinity index's recency as the caches': earliest needed newest
        core.affinity_insert(p.instance_id, p.hashes)
    return out
