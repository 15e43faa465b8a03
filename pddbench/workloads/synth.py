"""Synthetic agentic traces: seeded, vectorised generation of multi-turn agent tasks.
(Over 500 lines for one reason: one vectorised pipeline, sessions → turns → arrivals → hashes.)

Model (parameters in a :class:`~pddbench.workloads.synth_profile.Profile`):

* **Sessions** (agent tasks) start as a non-homogeneous Poisson process over the
  period — a daily cosine cycle and a weekend factor — and each picks an agent type by
  Zipf popularity (rank = order in the profile) tilted by per-type weekly trends.
* **Turns.** Turn 0's prompt = the agent type's system+tools prompt (shared by every
  task of that type) + a task prompt. Turn n+1's prompt = turn n's prompt + turn n's
  output + a tool result. Outputs are short (log-normal), tool results log-normal with
  an occasional big one (a file or a web page).
* **Compaction.** When a prompt grows past the session's threshold (or at random), that
  turn is a summarise request (its output is the summary) and the next turn restarts
  from the agent prompt + summary + restored context.
* **Drift.** Turn counts, tool-result sizes, big-result probability and compaction
  thresholds are scaled by piecewise-linear multipliers of the session's start day.
* **Timing.** ``arrival_s`` of turn n+1 = arrival of turn n + a service estimate
  (overhead + uncached tokens / prefill rate + output tokens / decode rate) +
  ``think_time_s`` (the tool time, which a replay applies after turn n's completion).
  Sessions that start near the end of the period may run past it.
* **Block hashes** (``ceil(input / block_size)`` per request, the last one partial when
  the prompt is not a multiple of the block size, as in Mooncake's traces): the agent
  prompt's full blocks carry ids ``2**63 + (type << 32) + position``, shared by all
  tasks of the type; every other block id comes from a global counter starting at 1
  (below 2**63, so the two never collide): one id per position of a prefix path (a
  session segment between compactions), one fresh id per partial last block.

Because the structure is known, :func:`synthesise` also returns each request's cached
tokens under an unbounded prefix cache (exactly what
:func:`pddbench.workloads.hitrate.prefix_hits` measures, without replaying ~10^8 hashes).

This module draws numbers and builds Arrow tables; it does no file I/O (see
:mod:`pddbench.workloads.traceio`) and no printing (see ``synth_cli``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.errors import UserError
from pddbench.workloads.hitrate import HitResult
from pddbench.workloads.inspect import HitStats, grouped_hit_stats
from pddbench.workloads.schema import Col
from pddbench.workloads.synth_profile import LogNormal, Profile
from pddbench.workloads.traceio import build_table, hashes_from_flat
from pddbench.workloads.validate import block_size_problem

AGENT_ID_BASE = np.uint64(1 << 63)
"""Agent-prompt block ids are ``AGENT_ID_BASE + (type << 32) + position``; counter ids < 2**63."""

SECONDS_PER_DAY = 86400.0
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY
MAX_LIST_VALUES = 2**31 - 1  # list<uint64> has int32 offsets
_HASH_CHUNK = 1 << 24  # positions per step when filling block ids (bounds temporaries)


@dataclass(frozen=True)
class SynthOptions:
    """Size and seed overrides; at most one of ``sessions``, ``rate``, ``requests``."""

    sessions: int | None = None
    days: float | None = None
    rate: float | None = None
    requests: int | None = None
    seed: int | None = None
    block_size: int | None = None

    def check(self) -> None:
        chosen = [n for n in ("sessions", "rate", "requests") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise UserError(f"give at most one of --sessions, --rate, --requests (got {chosen})")
        if self.block_size is not None and (why := block_size_problem(self.block_size)):
            raise UserError(f"--block-size {why}: a replay could not run the trace")
        for name, low in (("sessions", 1), ("requests", 1), ("seed", 0)):
            value = getattr(self, name)
            if value is not None and value < low:
                raise UserError(f"--{name.replace('_', '-')} must be at least {low}")
        for name in ("days", "rate"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise UserError(f"--{name} must be a positive number")


@dataclass
class SynthTrace:
    """A generated trace: the canonical table plus what the generator knows about it."""

    table: pa.Table
    cached_tokens: np.ndarray  # int64 per row: unbounded-cache hit, as hitrate.prefix_hits
    sessions: int
    epoch: str
    source: dict[str, object] = field(default_factory=dict)

    def hits(self) -> HitResult:
        """Each request's outcome in an unbounded prefix cache (as ``prefix_hits`` gives)."""
        inputs = self.table.column(Col.INPUT_LENGTH).to_numpy().astype(np.float64)
        rate = self.cached_tokens / np.maximum(inputs, 1.0)
        return HitResult(cached_tokens=self.cached_tokens, hit_rate=rate, capacity_blocks=None)


# ---------------------------------------------------------------- random draws


def _lognormal(
    rng: np.random.Generator, dist: LogNormal, size: int, scale: np.ndarray | float = 1.0
) -> np.ndarray:
    """Draws of ``dist`` (median multiplied by ``scale``), clipped to its bounds, as float64."""
    z = rng.standard_normal(size)
    values = dist.median * np.asarray(scale, dtype=np.float64) * np.exp(dist.sigma * z)
    return np.clip(values, dist.min, dist.max if dist.max is not None else np.inf)


def _tokens(values: np.ndarray) -> np.ndarray:
    return np.maximum(np.rint(values), 1).astype(np.int64)


def _drift(profile: Profile, name: str, day: np.ndarray) -> np.ndarray:
    knots = profile.drift
    return np.interp(day, knots.day, getattr(knots, name))


def _intensity(profile: Profile, t: np.ndarray) -> np.ndarray:
    """Relative session arrival intensity at offsets ``t`` (seconds from the epoch)."""
    arr = profile.arrivals
    epoch = profile.epoch_datetime()  # UTC
    since_midnight = epoch.hour * 3600 + epoch.minute * 60 + epoch.second + t
    hour = (since_midnight / 3600.0) % 24.0
    daily = 1.0 + arr.daily_amplitude * np.cos(2 * np.pi * (hour - arr.peak_hour_utc) / 24.0)
    weekday = (epoch.weekday() + np.floor(since_midnight / SECONDS_PER_DAY)) % 7
    return daily * np.where(weekday >= 5, arr.weekend_factor, 1.0)


def _session_starts(
    rng: np.random.Generator, profile: Profile, duration: float, count: int
) -> np.ndarray:
    """``count`` sorted session start offsets drawn from the intensity over ``[0, duration)``."""
    cells = int(min(max(duration / 60.0, 1000), 2_000_000))
    edges = np.linspace(0.0, duration, cells + 1)
    density = _intensity(profile, 0.5 * (edges[:-1] + edges[1:]))
    cumulative = np.concatenate(([0.0], np.cumsum(density)))
    u = rng.uniform(0.0, cumulative[-1], size=count)
    return np.sort(np.interp(u, cumulative, edges))


@dataclass
class _Sessions:
    start: np.ndarray  # float64 seconds, sorted
    agent: np.ndarray  # int64 agent type index
    turns: np.ndarray  # int64 >= 1
    task: np.ndarray  # int64 task prompt tokens
    threshold: np.ndarray  # int64 compaction threshold tokens

    def take(self, idx: np.ndarray) -> _Sessions:
        return _Sessions(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def _draw_agents(rng: np.random.Generator, profile: Profile, start: np.ndarray) -> np.ndarray:
    types = profile.agents.types
    rank = np.arange(1, len(types) + 1, dtype=np.float64)
    log_base = -profile.agents.zipf_exponent * np.log(rank)
    trend = np.array([a.trend_per_week for a in types])
    u = rng.uniform(size=start.size)
    out = np.empty(start.size, dtype=np.int64)
    step = max(1, (1 << 22) // len(types))
    for lo in range(0, start.size, step):
        weeks = start[lo : lo + step, None] / SECONDS_PER_WEEK
        logits = log_base[None, :] + trend[None, :] * weeks
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        cdf = np.cumsum(weights, axis=1)
        cdf /= cdf[:, -1:]
        out[lo : lo + step] = np.minimum(
            (u[lo : lo + step, None] >= cdf).sum(axis=1), len(types) - 1
        )
    return out


def _draw_sessions(rng: np.random.Generator, profile: Profile, start: np.ndarray) -> _Sessions:
    agent = _draw_agents(rng, profile, start)
    types = profile.agents.types
    day = start / SECONDS_PER_DAY
    turns_scale = np.array([a.turns_scale for a in types])[agent] * _drift(
        profile, "turns_scale", day
    )
    turns = _tokens(_lognormal(rng, profile.session.turns, start.size, turns_scale))
    task_scale = np.array([a.task_scale for a in types])[agent]
    task = _tokens(_lognormal(rng, profile.session.task_prompt, start.size, task_scale))
    comp_scale = _drift(profile, "compaction_scale", day)
    threshold = _tokens(_lognormal(rng, profile.compaction.threshold, start.size, comp_scale))
    return _Sessions(start=start, agent=agent, turns=turns, task=task, threshold=threshold)


def _expected_turns(profile: Profile) -> float:
    dist = profile.session.turns
    scale = np.mean([a.turns_scale for a in profile.agents.types])
    return max(1.0, dist.median * scale * math.exp(dist.sigma**2 / 2))


def _choose_sessions(
    rng: np.random.Generator, profile: Profile, duration: float, opts: SynthOptions
) -> _Sessions:
    if opts.sessions is not None:
        return _draw_sessions(rng, profile, _session_starts(rng, profile, duration, opts.sessions))
    if opts.requests is None:
        rate = opts.rate if opts.rate is not None else profile.arrivals.sessions_per_s
        count = int(rng.poisson(rate * duration))
        if count == 0:
            raise UserError(f"no session arrives in {duration:g} s at {rate:g} sessions/s")
        return _draw_sessions(rng, profile, _session_starts(rng, profile, duration, count))
    # a target request count: draw a pool, thin it uniformly (keeps the arrival shape)
    # until the turns add up, and shorten the last session taken to hit the count exactly
    pool = int(1.5 * opts.requests / _expected_turns(profile)) + 16
    while True:
        drawn = _draw_sessions(rng, profile, _session_starts(rng, profile, duration, pool))
        order = rng.permutation(pool)
        total = np.cumsum(drawn.turns[order])
        if total[-1] >= opts.requests:
            break
        pool *= 2
    k = int(np.searchsorted(total, opts.requests)) + 1
    drawn.turns[order[k - 1]] -= int(total[k - 1]) - opts.requests
    return drawn.take(np.sort(order[:k]))


# ---------------------------------------------------------------- turns and compaction


@dataclass
class _Turns:
    session: np.ndarray  # int64 session index, session-major order
    index: np.ndarray  # int64 turn index within the session
    input: np.ndarray  # int64 prompt tokens
    output: np.ndarray  # int64
    think: np.ndarray  # float64 tool time before the turn (NaN for turn 0)
    segment_start: np.ndarray  # bool: turn 0 or the first turn after a compaction
    cached: np.ndarray  # int64 unbounded-cache hit (agent prompt assumed warm)


def _segmented_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at every index where ``starts`` is true."""
    total = np.cumsum(values)
    head = np.maximum.accumulate(np.where(starts, np.arange(values.size), 0))
    return total - total[head] + values[head]


def _shift(values: np.ndarray) -> np.ndarray:
    """``values`` moved one row down (row 0 gets 0): the previous turn's value."""
    return np.concatenate((np.zeros(1, dtype=values.dtype), values[:-1]))


def _compact(
    session: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    system: np.ndarray,
    task: np.ndarray,
    output: np.ndarray,
    tool: np.ndarray,
    summary: np.ndarray,
    restored: np.ndarray,
    *,
    threshold: np.ndarray,
    random_compaction: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Place compactions; returns (segment start, summarise request, prompt tokens) per turn.

    Rounds: compute every prompt from the current segment starts, then make the first
    crossing of each segment (prompt over the threshold, or a random compaction) a
    summarise request whose next turn starts a new segment; repeat for the sessions that
    changed. Marking a start never changes earlier turns, so each round only refines.
    """
    start = first.copy()
    summarise = np.zeros(first.size, dtype=bool)
    inputs = np.zeros(first.size, dtype=np.int64)
    touched = np.zeros(int(session.max()) + 1 if session.size else 0, dtype=bool)
    rows = np.arange(first.size)  # whole sessions, contiguous: shifts stay within them
    while rows.size:
        st, sm = start[rows], summarise[rows]
        prev_out = _shift(np.where(sm, summary[rows], output[rows]))
        # restored context is at most half of what was compacted
        compacted = _shift(inputs[rows]) - system[rows]
        kept = np.minimum(restored[rows], np.maximum(compacted // 2, 0))
        base = system[rows] + np.where(first[rows], task[rows], prev_out + kept)
        prompt = _segmented_cumsum(np.where(st, base, prev_out + tool[rows]), st)
        inputs[rows] = prompt
        over = prompt > threshold[rows]
        # a threshold crossing compacts at the turn before (so even a last turn counts);
        # a random compaction makes the turn itself the summarise request
        crossing = over | (random_compaction[rows] & ~last[rows])
        candidates = np.flatnonzero(crossing & ~st & ~sm)
        if candidates.size == 0:
            break
        segment = np.cumsum(st)[candidates]
        local = candidates[np.concatenate(([True], segment[1:] != segment[:-1]))]
        # an agent compacts *before* its context overflows: the turn before a threshold
        # crossing is the summarise request (it may be the segment's first turn)
        local = local - over[local]
        chosen = rows[local]
        summarise[chosen] = True
        start[chosen + 1] = True
        touched[:] = False
        touched[session[chosen]] = True
        rows = rows[touched[session[rows]]]
    return start, summarise, inputs


def _draw_turns(rng: np.random.Generator, profile: Profile, sessions: _Sessions) -> _Turns:
    n_total = int(sessions.turns.sum())
    session = np.repeat(np.arange(sessions.turns.size), sessions.turns)
    first_row = np.concatenate(([0], np.cumsum(sessions.turns)[:-1]))
    index = np.arange(n_total) - first_row[session]
    first = index == 0
    last = index == sessions.turns[session] - 1
    types = profile.agents.types
    agent = sessions.agent[session]
    day = sessions.start[session] / SECONDS_PER_DAY
    spec, comp = profile.session, profile.compaction

    output_scale = np.array([a.output_scale for a in types])[agent]
    output = _tokens(_lognormal(rng, spec.output, n_total, output_scale))
    tool_scale = np.array([a.tool_scale for a in types])[agent]
    tool_drift = _drift(profile, "tool_scale", day)
    tool = _lognormal(rng, spec.tool_result, n_total, tool_scale * tool_drift)
    big_prob = spec.big_tool_prob * _drift(profile, "big_tool_prob_scale", day)
    big = rng.uniform(size=n_total) < big_prob
    big_tool = _lognormal(rng, spec.big_tool_result, n_total, tool_scale)
    tool = _tokens(np.where(big, big_tool, tool))
    think = _lognormal(rng, spec.think_time, n_total)
    summary = _tokens(_lognormal(rng, comp.summary_output, n_total))
    restored = _tokens(_lognormal(rng, comp.restored, n_total))
    random_compaction = rng.uniform(size=n_total) < comp.random_prob

    system = np.array([a.system_tokens for a in types], dtype=np.int64)[agent]
    start, summarise, inputs = _compact(
        session, first, last, system, sessions.task[session], output, tool, summary, restored,
        threshold=sessions.threshold[session], random_compaction=random_compaction,
    )  # fmt: skip

    block = profile.block_size
    prev_input = _shift(inputs)
    agent_blocks = system // block
    cached = np.where(start, agent_blocks * block, (prev_input // block) * block)
    return _Turns(
        session=session,
        index=index,
        input=inputs,
        output=np.where(summarise, summary, output),
        think=np.where(first, np.nan, think),
        segment_start=start,
        cached=cached,
    )


def _arrivals(profile: Profile, sessions: _Sessions, turns: _Turns) -> np.ndarray:
    """Turn arrival offsets: previous arrival + service estimate + tool time."""
    svc = profile.service
    service = (
        svc.overhead_s
        + (turns.input - turns.cached) / svc.prefill_tokens_per_s
        + turns.output / svc.decode_tokens_per_s
    )
    first = turns.index == 0
    step = np.where(first, 0.0, np.concatenate(([0.0], service[:-1])) + np.nan_to_num(turns.think))
    return sessions.start[turns.session] + _segmented_cumsum(step, first)


# ---------------------------------------------------------------- block hashes


def _block_hashes(
    block: int, inputs: np.ndarray, agent: np.ndarray, agent_blocks: np.ndarray, segment: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and flat block ids for rows (already in output order).

    ``segment`` numbers each row's prefix path (rows of one segment share block ids).
    """
    counts = -(-inputs // block)
    full = inputs // block
    offsets = np.zeros(inputs.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    if total > MAX_LIST_VALUES:
        raise UserError(
            f"trace too large: {total:,} block hashes exceed the {MAX_LIST_VALUES:,} a "
            "list<uint64> column holds; generate fewer requests or use a larger --block-size"
        )
    # counter ids: a run per segment (its longest full-block path beyond the agent prompt),
    # then one per partial last block
    n_seg = int(segment.max()) + 1 if segment.size else 0
    seg_len = np.zeros(n_seg, dtype=np.int64)
    np.maximum.at(seg_len, segment, full - agent_blocks)
    seg_base = np.ones(n_seg, dtype=np.int64)
    np.cumsum(seg_len[:-1], out=seg_base[1:])
    seg_base[1:] += 1
    partial = counts > full
    partial_id = 1 + int(seg_len.sum()) + np.cumsum(partial) - 1

    # values = position-in-row + a piecewise-constant level: the agent run's level, then
    # the segment run's level; built as a cumulative sum of level changes (mod 2**64)
    row_start = offsets[:-1]
    agent_level = (AGENT_ID_BASE + (agent.astype(np.uint64) << np.uint64(32))).astype(np.uint64)
    seg_level = seg_base[segment].astype(np.uint64) - agent_blocks.astype(np.uint64)
    agent_level = np.where(agent_blocks > 0, agent_level, seg_level)
    levels = np.empty(2 * inputs.size, dtype=np.uint64)
    levels[0::2] = agent_level - row_start.astype(np.uint64)
    levels[1::2] = seg_level - row_start.astype(np.uint64)
    changes = np.diff(levels, prepend=np.uint64(0))
    positions = np.empty(2 * inputs.size, dtype=np.int64)
    positions[0::2] = row_start
    positions[1::2] = row_start + agent_blocks
    values = np.zeros(total, dtype=np.uint64)
    values[positions[0::2]] = changes[0::2]
    has_agent = agent_blocks > 0  # else both changes land on the row start; the first is final
    values[positions[1::2][has_agent]] = changes[1::2][has_agent]
    np.cumsum(values, out=values)
    for lo in range(0, total, _HASH_CHUNK):
        hi = min(total, lo + _HASH_CHUNK)
        values[lo:hi] += np.arange(lo, hi, dtype=np.uint64)
    values[offsets[1:][partial] - 1] = partial_id[partial].astype(np.uint64)
    return offsets, values


# ---------------------------------------------------------------- assembly


def _ids(prefix: str, numbers: np.ndarray, width: int) -> pa.Array:
    text = pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width=width, padding="0")
    return pc.binary_join_element_wise(prefix, text, "")


def synthesise(profile: Profile, options: SynthOptions | None = None) -> SynthTrace:
    """Generate a canonical trace from ``profile`` (deterministic for a given seed)."""
    opts = options or SynthOptions()
    opts.check()
    if opts.block_size is not None:
        profile = profile.model_copy(update={"block_size": opts.block_size})
    elif why := block_size_problem(profile.block_size):
        raise UserError(f"profile block_size {why}: a replay could not run the trace")
    days = opts.days if opts.days is not None else profile.days
    seed = opts.seed if opts.seed is not None else profile.seed
    rng = np.random.default_rng(seed)

    sessions = _choose_sessions(rng, profile, days * SECONDS_PER_DAY, opts)
    turns = _draw_turns(rng, profile, sessions)
    arrival = _arrivals(profile, sessions, turns)
    order = np.argsort(arrival, kind="stable")  # session-major ties: by session, then turn

    session = turns.session[order]
    index = turns.index[order]
    inputs = turns.input[order]
    agent = sessions.agent[session]
    system = np.array([a.system_tokens for a in profile.agents.types], dtype=np.int64)
    agent_blocks = system[agent] // profile.block_size
    segment = (np.cumsum(turns.segment_start) - 1)[order]
    cached = turns.cached[order]
    _, first_of_type = np.unique(agent, return_index=True)
    cached[first_of_type] = 0  # nothing is warm before the first task of a type
    offsets, values = _block_hashes(profile.block_size, inputs, agent, agent_blocks, segment)

    session_ids = _ids("s", np.arange(sessions.turns.size), 8)
    session_col = session_ids.take(pa.array(session))
    request_id = pc.binary_join_element_wise(session_col, _ids("-t", index, 3), "")
    parent_text = pc.binary_join_element_wise(
        session_col, _ids("-t", np.maximum(index - 1, 0), 3), ""
    )
    parent = pc.if_else(pa.array(index == 0), pa.nulls(index.size, pa.string()), parent_text)
    names = pa.array([a.name for a in profile.agents.types], pa.string())
    think = pa.array(turns.think[order], pa.float64(), from_pandas=True)  # NaN -> null

    table = build_table(
        request_id=request_id,
        session_id=session_col,
        parent_request_id=parent,
        turn_index=index.astype(np.int32),
        arrival_s=arrival[order],
        input_length=inputs.astype(np.int32),
        output_length=turns.output[order].astype(np.int32),
        block_size=profile.block_size,
        block_hashes=hashes_from_flat(offsets, values),
        think_time_s=think,
        agent_type=names.take(pa.array(agent)),
    )
    source: dict[str, object] = {
        "generator": "pddbench trace synth",
        "profile": profile.name,
        "seed": seed,
        "days": days,
        "options": {k: v for k, v in asdict(opts).items() if v is not None},
        "parameters": profile.model_dump(mode="json"),
    }
    return SynthTrace(
        table=table,
        cached_tokens=cached,
        sessions=int(sessions.turns.size),
        epoch=profile.epoch,
        source=source,
    )


# ---------------------------------------------------------------- calibration figures


@dataclass(frozen=True)
class Calibration:
    """The E1 figures of a generated trace: overall and per week of arrival."""

    overall: HitStats
    weeks: list[tuple[int, HitStats]]  # (week index from the epoch, figures)


def calibration(trace: SynthTrace) -> Calibration:
    """Hit-rate figures (unbounded cache) of ``trace``, overall and per week."""
    hits = trace.hits()
    inputs = trace.table.column(Col.INPUT_LENGTH).to_numpy()
    week = np.floor(trace.table.column(Col.ARRIVAL).to_numpy() / SECONDS_PER_WEEK)
    present, group = np.unique(week.astype(np.int64), return_inverse=True)
    overall = grouped_hit_stats(np.zeros(inputs.size, dtype=np.int64), 1, hits, inputs)[0]
    weekly = grouped_hit_stats(group, present.size, hits, inputs)
    return Calibration(overall=overall, weeks=list(zip(present.tolist(), weekly, strict=True)))
