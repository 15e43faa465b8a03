"""Steady-state ladder points: a window of the trace as the system sees it in service (sans-IO).

A ladder point at load scale ``x`` sends for ``send_s`` wall seconds and covers a trace
window of ``send_s × speedup`` seconds (``speedup = base × x``), as before. A steady point
replays **every request of the trace whose arrival falls in that window**, not the sessions
that start there: the window is cut into ``speedup`` consecutive **slices** of ``send_s``
trace seconds, and the slices play at once, each from the point's start (a request's
planned offset is its arrival minus its slice's start). So

* sessions in progress at a slice's start continue at their turn (their first request in
  the slice is due at its own offset; the earlier turns are the history), new sessions
  start as the trace says, and a turn whose previous turn is in the same slice waits for
  it and its think time, as the trace says (:func:`~pddbench.harness.plan.sessions.think_time`);
* the point's requests are the window's: its turn-0 share and hit-rate mix are the
  window's own (the warm-up and closed-loop lateness take a subset, not a biased one);
* the offered rate is ``speedup`` times the window's own.

Each slice plays in its own **prompt namespace** (``PlannedRequest.namespace``, the
slice's index + 1; :func:`~pddbench.workloads.materialize.namespaced`), so that no slice
hits a prefix another slice (playing later or earlier trace time at the same wall time)
put in the caches. The caches must then hold what the trace's history leaves for each
slice: the :class:`PrimingPlan` lists, per slice, the leading blocks of each of its
requests that the trace had seen before the slice's start (an in-progress session's
earlier turns, a shared system prompt), one entry per distinct prefix, earliest needed
first. The drivers apply it before the point starts, through the servers' own routing
and caches (:mod:`pddbench.servers.priming`). With those primes each request's hit in an
unbounded cache is its hit in the trace (:class:`~pddbench.workloads.hitrate.FirstSeen`:
one rule for both), which is the theoretical hit the records carry.

Independent points: a point's caches are primed from the trace's history only, never from
an earlier point's prompts (namespaces differ per point and slice: the point's index is
part of the namespace).

Not honoured here: ``max_requests`` (a point's size is its window's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pddbench.harness.config.replay import Selection, ThinkPolicy
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.plan.sessions import task_groups, think_time
from pddbench.harness.rundir.ladder import RequestMix
from pddbench.workloads.hitrate import FirstSeen, arrival_order
from pddbench.workloads.materialize import stable_hash64
from pddbench.workloads.schema import Col

# namespaces of one point: point index × this + slice index + 1 (a point has fewer slices)
POINT_NAMESPACES = 1 << 24


@dataclass(frozen=True)
class PrimeEntry:
    """A prefix the caches hold at a point's start: the first ``blocks`` full trace blocks
    of trace row ``row``, in prompt namespace ``namespace``."""

    row: int  # a row of the trace table (its own order)
    blocks: int
    namespace: int
    need_s: float  # the planned offset of the point's first request on this prefix


@dataclass(frozen=True)
class PrimingPlan:
    """What the trace's history leaves in the caches for one point, earliest needed first."""

    entries: tuple[PrimeEntry, ...] = ()

    @property
    def blocks(self) -> int:
        return sum(e.blocks for e in self.entries)


@dataclass(frozen=True)
class SteadyPoint:
    """One steady-state point's plan: its requests, their trace hits, what to prime, and
    the mix of the trace window it replays."""

    requests: list[PlannedRequest]
    theoretical_cached: dict[str, int]  # the trace's unbounded-cache hit, in tokens
    priming: PrimingPlan
    trace_mix: RequestMix  # every request of the window (before the warm-up cut)
    slices: float

    def planned_mix(self, from_s: float, to_s: float) -> RequestMix:
        """The mix of the requests planned in ``[from_s, to_s)`` (a point's measured
        time), with their hit rates in the trace."""
        kept = [r for r in self.requests if from_s <= r.arrival_s < to_s]
        hit = self.theoretical_cached
        return RequestMix.of(
            np.array([r.turn_index for r in kept]),
            np.array([hit[r.request_id] / max(1, r.input_length) for r in kept]),
        )


class SteadyIndex:
    """A trace indexed once for steady-state points (and their schedule): arrival order,
    the base selection's sample, and where every block was first seen (built on the first
    point, not for schedule queries)."""

    def __init__(self, table: pa.Table, selection: Selection) -> None:
        order = arrival_order(table)
        self._rows = np.arange(table.num_rows) if order is None else order
        self._ordered = table if order is None else table.take(pa.array(order))
        t = self._ordered
        self._arrival = t.column(Col.ARRIVAL).to_numpy(zero_copy_only=False).astype(np.float64)
        self._keep = np.ones(t.num_rows, dtype=bool)
        if selection.sample < 1.0 and t.num_rows:
            unique, idx = np.unique(task_groups(t).astype(str), return_inverse=True)
            draws = np.array([stable_hash64(f"{selection.seed}:{g}") for g in unique])
            self._keep = (draws.astype(np.float64) < selection.sample * 2.0**64)[idx]
        self._first: FirstSeen | None = None

    @property
    def first_seen(self) -> FirstSeen:
        if self._first is None:
            self._first = FirstSeen.of(self._ordered)
        return self._first

    def _window(self, start_s: float, duration_s: float) -> np.ndarray:
        """Arrival positions of the (sampled) requests arriving in the window."""
        lo, hi = np.searchsorted(self._arrival, [start_s, start_s + duration_s], side="left")
        pos = np.arange(lo, hi, dtype=np.int64)
        return pos[self._keep[lo:hi]]

    def _slices(self, pos: np.ndarray, start_s: float, send_s: float) -> np.ndarray:
        return np.floor((self._arrival[pos] - start_s) / send_s).astype(np.int64)

    def offsets(
        self, start_s: float, speedup: float, duration_s: float, send_s: float
    ) -> list[float]:
        """Sorted planned send offsets of the point sending ``send_s`` over the window
        ``[start_s, start_s + duration_s)`` (``speedup`` slices of ``send_s``: implied)."""
        del speedup  # the window's length and send_s say how many slices
        pos = self._window(start_s, duration_s)
        off = self._arrival[pos] - start_s - self._slices(pos, start_s, send_s) * send_s
        return np.sort(off).tolist()

    def mix(self, start_s: float, duration_s: float) -> RequestMix:
        """Turn-0 share and hit-rate bins of the trace's requests in the window."""
        pos = self._window(start_s, duration_s)
        hits = self.first_seen.leading(pos, pos)
        return RequestMix.of(self._col_np(Col.TURN_INDEX)[pos], self._rate(pos, hits))

    def _col_np(self, col: str) -> np.ndarray:
        return self._ordered.column(col).to_numpy(zero_copy_only=False)

    def _rate(self, pos: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        cached = self._cached(pos, blocks)
        inp = self._col_np(Col.INPUT_LENGTH)[pos].astype(np.float64)
        return np.divide(cached, inp, out=np.zeros(pos.size), where=inp > 0)

    def _cached(self, pos: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        bs = self._col_np(Col.BLOCK_SIZE)[pos].astype(np.int64)
        return np.minimum(blocks * bs, self._col_np(Col.INPUT_LENGTH)[pos].astype(np.int64))

    def point(
        self,
        start_s: float,
        duration_s: float,
        send_s: float,
        *,
        think_policy: ThinkPolicy = ThinkPolicy.TRACE,
        point_index: int = 0,
    ) -> SteadyPoint:
        """The steady-state point replaying the window ``[start_s, start_s + duration_s)``
        in slices of ``send_s`` (see the module)."""
        if send_s <= 0 or duration_s <= 0:
            raise ValueError("a steady point needs send_s > 0 and duration_s > 0")
        pos = self._window(start_s, duration_s)
        first = self.first_seen
        hits = first.leading(pos, pos)
        trace_mix = RequestMix.of(self._col_np(Col.TURN_INDEX)[pos], self._rate(pos, hits))
        sl = self._slices(pos, start_s, send_s)
        off = self._arrival[pos] - start_s - sl * send_s
        bounds = np.searchsorted(self._arrival, start_s + np.arange(sl.max(initial=0) + 1) * send_s)
        primed = first.leading(pos, bounds[sl])
        base_ns = point_index * POINT_NAMESPACES + 1
        requests = self._requests(pos, sl, off, base_ns, think_policy)
        cached = self._cached(pos, hits).tolist()
        theoretical = {r.request_id: c for r, c in zip(requests, cached, strict=True)}
        priming = self._priming(pos, sl, off, primed, base_ns)
        requests.sort(key=lambda r: (r.arrival_s, r.request_id))
        return SteadyPoint(requests, theoretical, priming, trace_mix, duration_s / send_s)

    def _requests(
        self,
        pos: np.ndarray,
        sl: np.ndarray,
        off: np.ndarray,
        base_ns: int,
        policy: ThinkPolicy,
    ) -> list[PlannedRequest]:
        t = self._ordered.take(pa.array(pos))
        ids = t.column(Col.REQUEST_ID).to_pylist()
        parents = t.column(Col.PARENT_REQUEST_ID).to_pylist()
        sessions = t.column(Col.SESSION_ID).to_pylist()
        turns = t.column(Col.TURN_INDEX).to_pylist()
        inputs = t.column(Col.INPUT_LENGTH).to_pylist()
        outputs = t.column(Col.OUTPUT_LENGTH).to_pylist()
        think = t.column(Col.THINK_TIME).to_numpy(zero_copy_only=False).astype(np.float64)
        agents = (
            t.column(Col.AGENT_TYPE).to_pylist()
            if Col.AGENT_TYPE in t.column_names
            else [None] * t.num_rows
        )
        arrival = self._arrival[pos].tolist()
        slices, offsets = sl.tolist(), off.tolist()
        where = {rid: k for k, rid in enumerate(ids)}
        out = []
        for k, rid in enumerate(ids):
            p = where.get(parents[k]) if parents[k] is not None else None
            same = p is not None and slices[p] == slices[k]  # a parent in another slice: history
            out.append(
                PlannedRequest(
                    request_id=rid,
                    session_id=sessions[k],
                    turn_index=int(turns[k]),
                    row=int(self._rows[pos[k]]),
                    parent_request_id=parents[k] if same else None,
                    arrival_s=float(offsets[k]),
                    think_time_s=think_time(
                        think[k], arrival[k], arrival[p] if same and p is not None else None, policy
                    )
                    if same
                    else 0.0,
                    input_length=int(inputs[k]),
                    output_length=int(outputs[k]),
                    agent_type=agents[k],
                    namespace=base_ns + slices[k],
                )
            )
        return out

    def _priming(
        self, pos: np.ndarray, sl: np.ndarray, off: np.ndarray, primed: np.ndarray, base_ns: int
    ) -> PrimingPlan:
        """One entry per distinct primed prefix of a slice (a prefix is named by the row
        that first held its last block: one hash per row and position), earliest first."""
        first = self.first_seen
        has = np.flatnonzero(primed > 0)
        last = first.first_row[first.starts[pos[has]] + primed[has] - 1]
        order = np.lexsort((off[has], sl[has]))  # by slice, then offset
        seen: set[tuple[int, int, int]] = set()
        entries: list[PrimeEntry] = []
        for k in order.tolist():
            i = int(has[k])
            key = (int(sl[i]), int(last[k]), int(primed[i]))
            if key in seen:
                continue
            seen.add(key)
            entries.append(
                PrimeEntry(
                    row=int(self._rows[pos[i]]),
                    blocks=int(primed[i]),
                    namespace=base_ns + int(sl[i]),
                    need_s=float(off[i]),
                )
            )
        entries.sort(key=lambda e: (e.need_s, e.namespace))
        return PrimingPlan(tuple(entries))
