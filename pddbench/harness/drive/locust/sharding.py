"""Which Locust worker drives which requests: deterministic sharding by task group (pure).

A *task group* is every session connected to another by a request dependency (a turn's
previous turn, the request that spawned a sub-agent) or by the trace's
``parent_session_id``. A group never spans workers, so each worker's SessionPlayer holds
the parent of every request it will send and keeps the same timing semantics as a single
asyncio engine.

Groups are dealt in order of their first arrival (ties: group id) to the worker with the
least work so far (ties: lowest index), which balances both the request count and the
arrival rate over time. The result depends only on the plan and the number of workers.

Must not: do I/O, know about Locust or sockets.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pddbench.harness.plan.player import PlannedRequest


class _UnionFind:
    def __init__(self) -> None:
        self._parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self._parent.setdefault(x, x)
        root = x
        while parent != root:
            root = parent
            parent = self._parent[root]
        while self._parent[x] != root:  # path compression
            self._parent[x], x = root, self._parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # the smaller id wins: the root does not depend on visiting order
            if rb < ra:
                ra, rb = rb, ra
            self._parent[rb] = ra


def task_groups(
    requests: Sequence[PlannedRequest], parent_session: Mapping[str, str | None] | None = None
) -> list[str]:
    """The task-group id of every request (the smallest session id of its group)."""
    uf = _UnionFind()
    session_of = {r.request_id: r.session_id for r in requests}
    for r in requests:
        uf.find(r.session_id)
        parent = r.parent_request_id
        if parent is not None and parent in session_of:
            uf.union(r.session_id, session_of[parent])
    if parent_session:
        sessions = set(session_of.values())
        for s, p in parent_session.items():
            if p is not None and s in sessions and p in sessions:
                uf.union(s, p)
    return [uf.find(r.session_id) for r in requests]


@dataclass(frozen=True)
class ShardSummary:
    """What one worker was given (for the manifest)."""

    index: int
    groups: int
    requests: int
    first_arrival_s: float | None


@dataclass(frozen=True)
class Sharding:
    """The worker of every request of a plan (same order as the plan)."""

    workers: int
    worker_of: list[int]
    group_of: list[str]

    def indices(self, worker: int) -> list[int]:
        """Positions in the plan of the requests ``worker`` drives."""
        return [i for i, w in enumerate(self.worker_of) if w == worker]

    def summaries(self, requests: Sequence[PlannedRequest]) -> list[ShardSummary]:
        out = []
        for w in range(self.workers):
            mine = self.indices(w)
            out.append(
                ShardSummary(
                    index=w,
                    groups=len({self.group_of[i] for i in mine}),
                    requests=len(mine),
                    first_arrival_s=min((requests[i].arrival_s for i in mine), default=None),
                )
            )
        return out


def shard_plan(
    requests: Sequence[PlannedRequest],
    workers: int,
    parent_session: Mapping[str, str | None] | None = None,
) -> Sharding:
    """Deal whole task groups to ``workers`` workers (see the module docstring)."""
    if workers <= 0:
        raise ValueError("workers must be > 0")
    groups = task_groups(requests, parent_session)
    start: dict[str, float] = {}
    size: dict[str, int] = {}
    for r, g in zip(requests, groups, strict=True):
        start[g] = min(start.get(g, r.arrival_s), r.arrival_s)
        size[g] = size.get(g, 0) + 1
    least_loaded = [(0, w) for w in range(workers)]  # a heap of (requests so far, worker)
    worker_of_group: dict[str, int] = {}
    for g in sorted(start, key=lambda g: (start[g], g)):
        load, w = heapq.heappop(least_loaded)
        worker_of_group[g] = w
        heapq.heappush(least_loaded, (load + size[g], w))
    return Sharding(workers, [worker_of_group[g] for g in groups], groups)
