"""SessionPlayer: decides which request is due when; engines only execute (sans-IO).

The player holds a dependency graph of requests: a request with a parent (the previous
turn of its session, or the request that spawned a sub-agent) becomes *ready* only when
that parent has completed, and is then due at ``parent completion + think time``; a
request without a parent is due at its (selected, compressed) arrival offset. Every
request's **intended** send time is fixed the moment it becomes ready, so engines can
record intended-vs-actual send times and schedule lag honestly.

Time is whatever monotonic clock the engine uses, in seconds from the run's start; the
player never reads a clock itself. Both the asyncio engine and the Locust engine drive
this same class, so their timing semantics are identical.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from pddbench.harness.config.replay import OnError


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the replay plan (what to send, not when)."""

    request_id: str
    session_id: str
    turn_index: int
    row: int  # row of the trace table (for prompt materialisation)
    parent_request_id: str | None
    arrival_s: float  # offset from the start of the replay, after selection and speed-up
    think_time_s: float  # delay after the parent completes (ignored without a parent)
    input_length: int
    output_length: int
    agent_type: str | None = None  # the trace's agent type, where it has one
    namespace: int = 0  # prompt namespace (a steady-state point's slice; 0: the trace's)


@dataclass(frozen=True)
class DueRequest:
    """A request the engine should send now, with the time it was meant to be sent."""

    request: PlannedRequest
    intended_send_s: float


class SessionPlayer:
    """Sans-IO scheduler of a replay: feed it completions, ask it what is due."""

    def __init__(self, requests: Iterable[PlannedRequest], *, on_error: OnError = OnError.CONTINUE):
        self._on_error = on_error
        self._heap: list[tuple[float, int, PlannedRequest]] = []
        self._children: dict[str, list[PlannedRequest]] = {}
        self._seq = 0
        self._in_flight: set[str] = set()
        self._skipped: list[PlannedRequest] = []
        ids: set[str] = set()
        planned = list(requests)
        for req in planned:
            if req.request_id in ids:
                raise ValueError(f"duplicate request id {req.request_id!r} in the plan")
            ids.add(req.request_id)
        self._pending = len(planned)
        for req in planned:
            if req.parent_request_id is not None and req.parent_request_id in ids:
                self._children.setdefault(req.parent_request_id, []).append(req)
            else:  # a root, or a parent outside the selection: due at its own arrival
                self._push(req.arrival_s, req)

    def _push(self, due: float, req: PlannedRequest) -> None:
        heapq.heappush(self._heap, (due, self._seq, req))
        self._seq += 1

    @property
    def done(self) -> bool:
        """True when every request has been sent and completed (or skipped)."""
        return self._pending == 0

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def skipped(self) -> list[PlannedRequest]:
        """Requests never sent because a request they depend on failed (ABORT_SESSION)."""
        return list(self._skipped)

    def next_due_s(self) -> float | None:
        """The earliest intended send time among ready requests (None: none ready)."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_s: float) -> list[DueRequest]:
        """Every ready request whose intended send time is ``<= now_s``, earliest first."""
        due: list[DueRequest] = []
        while self._heap and self._heap[0][0] <= now_s:
            when, _, req = heapq.heappop(self._heap)
            self._in_flight.add(req.request_id)
            due.append(DueRequest(request=req, intended_send_s=when))
        return due

    def complete(self, request_id: str, finished_s: float, *, ok: bool = True) -> list[DueRequest]:
        """Record that a request finished; schedules its dependants.

        Returns the dependants that became ready (with their intended send times), for
        engines that want to log them; they are also queued for :meth:`pop_due`.
        """
        if request_id not in self._in_flight:
            raise KeyError(f"request {request_id!r} is not in flight")
        self._in_flight.remove(request_id)
        self._pending -= 1
        children = self._children.pop(request_id, [])
        if not ok and self._on_error is OnError.ABORT_SESSION:
            self._skip(children)
            return []
        ready = []
        for child in children:
            when = finished_s + max(child.think_time_s, 0.0)
            self._push(when, child)
            ready.append(DueRequest(request=child, intended_send_s=when))
        return ready

    def _skip(self, requests: list[PlannedRequest]) -> None:
        stack = list(requests)
        while stack:
            req = stack.pop()
            self._skipped.append(req)
            self._pending -= 1
            stack.extend(self._children.pop(req.request_id, []))
