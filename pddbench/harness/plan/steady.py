"""Steady-state ladder points: a window of the trace as the system sees it in service (sans-IO).

A ladder point at load scale ``x`` sends for ``send_s`` wall seconds: a warm-up ``w``,
then its measured time ``m``. A steady point replays **every request of the trace whose
arrival falls in its window** of ``slices × m`` trace seconds (``slices = base speed-up ×
x``), not the sessions that start there: the window is cut into ``slices`` consecutive
stretches of ``m`` seconds (the last may be partial), and the **slices** play at once from
the point's start, slice ``j`` replaying its stretch after the ``w`` trace seconds just
before it (its warm-up: requests another slice measures, or the previous window's, played
again under their own ids ``<id>@w<j>``: :data:`WARM_MARK`). A request's planned offset
is its arrival minus its slice's start (its stretch's start − ``w``). So

* sessions in progress at a slice's start continue at their turn (their first request in
  the slice is due at its own offset; the earlier turns are the history), new sessions
  start as the trace says, and a turn whose previous turn is in the same slice waits for
  it and its think time, as the trace says (:func:`~pddbench.harness.plan.sessions.think_time`);
* the requests a point measures (planned after its warm-up) are exactly its window's: its
  turn-0 share and hit-rate mix are the window's own (a slow system's closed loop can
  delay later turns past the point's end: what it measures is then a subset);
* the offered rate is ``slices`` times the window's own.

Each slice plays in its own **prompt namespace** (``PlannedRequest.namespace``, the
slice's index + 1; :func:`~pddbench.workloads.materialize.namespaced`), so that no slice
hits a prefix another slice (playing later or earlier trace time at the same wall time)
put in the caches. The caches must then hold what the trace's history leaves for each
slice: the :class:`PrimingPlan` lists, per slice, the leading blocks of each of its
requests that the trace had seen before the slice starts (its warm-up's start): an
in-progress session's earlier turns, a shared system prompt; one entry per distinct
prefix, earliest needed first. The drivers apply it before the point starts, through
the servers' own routing and caches (:mod:`pddbench.servers.priming`). With those primes
each request's hit in an unbounded cache is its hit in the trace (one rule for both:
:class:`~pddbench.workloads.hitrate.FirstSeen`), the theoretical hit its record carries.

Independent points: a point's caches are primed from the trace's history only, never from
an earlier point's prompts (namespaces differ per point and slice: the point's index is
part of the namespace).

Not honoured here: ``max_requests`` (a point's size is its window's). Below one slice
(``x < 1 / base speed-up``) the one partial slice carries load only in the first part of
the point's measured time.
"""

from __future__ import annotations

import math
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
# a warm-up copy's request id: ``<trace id>@w<slice>`` (characters request ids may hold)
WARM_MARK = "@w"


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


@dataclass(frozen=True)
class _Slices:
    """Every request a point plays, as parallel arrays: arrival position, slice, offset
    in the slice (wall s from the point's start) and whether it is warm-up."""

    pos: np.ndarray
    slice: np.ndarray
    offset: np.ndarray
    warm: np.ndarray
    bounds: np.ndarray  # per slice, the first arrival position at its warm-up's start


class SteadyIndex:
    """A trace indexed once for steady-state points (and their schedule): arrival order,
    the base selection's sample, and where every block was first seen (built on the first
    point, not for schedule queries). ``warmup_s``: the points' warm-up, which every slice
    plays from the trace seconds just before its measured stretch."""

    def __init__(self, table: pa.Table, selection: Selection, *, warmup_s: float = 0.0) -> None:
        if warmup_s < 0:
            raise ValueError("warmup_s must be >= 0")
        self.warmup_s = warmup_s
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

    def _between(self, lo_s: float, hi_s: float) -> np.ndarray:
        """Arrival positions of the (sampled) requests arriving in ``[lo_s, hi_s)``."""
        lo, hi = np.searchsorted(self._arrival, [lo_s, hi_s], side="left")
        pos = np.arange(lo, hi, dtype=np.int64)
        return pos[self._keep[lo:hi]]

    def _slices(self, start_s: float, slices: float, send_s: float) -> _Slices:
        """Slice ``j`` measures ``[start + j·m, start + (j+1)·m)`` (``m = send_s −
        warmup``; the last may be partial) and plays the ``warmup`` before it first."""
        w = self.warmup_s
        m = send_s - w
        if m <= 0 or slices <= 0:
            raise ValueError("a steady point needs send_s > its warm-up and slices > 0")
        parts = []
        n = math.ceil(slices - 1e-9)
        for j in range(n):
            t_j = start_s + j * m
            pos = self._between(t_j - w, start_s + min(j + 1.0, slices) * m)
            arr = self._arrival[pos]
            parts.append((pos, np.full(pos.size, j), arr - (t_j - w), arr < t_j))
        pos, sl, off, warm = (np.concatenate(x) for x in zip(*parts, strict=True))
        edges = start_s + np.arange(n) * m - w
        return _Slices(pos, sl, off, warm, np.searchsorted(self._arrival, edges, side="left"))

    def offsets(
        self, start_s: float, speedup: float, duration_s: float, send_s: float
    ) -> list[float]:
        """Sorted planned send offsets of the point at ``speedup`` slices sending
        ``send_s`` from ``start_s`` (its window, ``speedup × (send_s − warm-up)`` long,
        is implied: ``duration_s`` is the cold schedule's and not read)."""
        del duration_s
        return np.sort(self._slices(start_s, speedup, send_s).offset).tolist()

    def mix(self, start_s: float, duration_s: float) -> RequestMix:
        """Turn-0 share and hit-rate bins of the trace's requests in the window."""
        pos = self._between(start_s, start_s + duration_s)
        hits = self.first_seen.leading(pos, pos)
        return RequestMix.of(self._col_np(Col.TURN_INDEX)[pos], self._rate(pos, hits))

    def window_requests(
        self, start_s: float, duration_s: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Input tokens, trace hit rates (fractions) and output tokens of the trace's
        requests in the window (what the sizing search's bounds price)."""
        pos = self._between(start_s, start_s + duration_s)
        hits = self.first_seen.leading(pos, pos)
        return (
            self._col_np(Col.INPUT_LENGTH)[pos],
            self._rate(pos, hits),
            self._col_np(Col.OUTPUT_LENGTH)[pos],
        )

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
        slices: float,
        send_s: float,
        *,
        think_policy: ThinkPolicy = ThinkPolicy.TRACE,
        point_index: int = 0,
    ) -> SteadyPoint:
        """The steady-state point measuring the window ``[start_s, start_s + slices ×
        (send_s − warm-up))`` in ``slices`` concurrent slices (see the module)."""
        sp = self._slices(start_s, slices, send_s)
        first = self.first_seen
        hits = first.leading(sp.pos, sp.pos)
        measured = sp.pos[~sp.warm]
        trace_mix = RequestMix.of(
            self._col_np(Col.TURN_INDEX)[measured], self._rate(measured, hits[~sp.warm])
        )
        primed = first.leading(sp.pos, sp.bounds[sp.slice])
        base_ns = point_index * POINT_NAMESPACES + 1
        requests = self._requests(sp, base_ns, think_policy)
        cached = self._cached(sp.pos, hits).tolist()
        theoretical = {r.request_id: c for r, c in zip(requests, cached, strict=True)}
        priming = self._priming(sp, primed, base_ns)
        requests.sort(key=lambda r: (r.arrival_s, r.request_id))
        return SteadyPoint(requests, theoretical, priming, trace_mix, slices)

    def _requests(self, sp: _Slices, base_ns: int, policy: ThinkPolicy) -> list[PlannedRequest]:
        t = self._ordered.take(pa.array(sp.pos))
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
        arrival = self._arrival[sp.pos].tolist()
        slices, offsets, warm = sp.slice.tolist(), sp.offset.tolist(), sp.warm.tolist()
        # a warm-up request is another slice's measured one (or the previous window's): it
        # plays again under its own id
        planned = [
            f"{rid}{WARM_MARK}{j}" if w else rid
            for rid, j, w in zip(ids, slices, warm, strict=True)
        ]
        where = {(rid, j): k for k, (rid, j) in enumerate(zip(ids, slices, strict=True))}
        out = []
        for k in range(len(ids)):
            p = where.get((parents[k], slices[k])) if parents[k] is not None else None
            # a parent outside the slice is history: the request is due at its offset
            out.append(
                PlannedRequest(
                    request_id=planned[k],
                    session_id=sessions[k],
                    turn_index=int(turns[k]),
                    row=int(self._rows[sp.pos[k]]),
                    parent_request_id=None if p is None else planned[p],
                    arrival_s=float(offsets[k]),
                    think_time_s=0.0
                    if p is None
                    else think_time(think[k], arrival[k], arrival[p], policy),
                    input_length=int(inputs[k]),
                    output_length=int(outputs[k]),
                    agent_type=agents[k],
                    namespace=base_ns + slices[k],
                )
            )
        return out

    def _priming(self, sp: _Slices, primed: np.ndarray, base_ns: int) -> PrimingPlan:
        """One entry per distinct primed prefix of a slice (a prefix is named by the row
        that first held its last block: one hash per row and position), earliest first."""
        first = self.first_seen
        has = np.flatnonzero(primed > 0)
        last = first.first_row[first.starts[sp.pos[has]] + primed[has] - 1]
        seen: set[tuple[int, int, int]] = set()
        entries: list[PrimeEntry] = []
        for k in np.lexsort((sp.offset[has], sp.slice[has])).tolist():
            i = int(has[k])
            key = (int(sp.slice[i]), int(last[k]), int(primed[i]))
            if key in seen:
                continue
            seen.add(key)
            entries.append(
                PrimeEntry(
                    row=int(self._rows[sp.pos[i]]),
                    blocks=int(primed[i]),
                    namespace=base_ns + int(sp.slice[i]),
                    need_s=float(sp.offset[i]),
                )
            )
        entries.sort(key=lambda e: (e.need_s, e.namespace))
        return PrimingPlan(tuple(entries))
