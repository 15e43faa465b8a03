"""Router decisions (sans-IO): which instance, which pipeline, and the link estimates behind them.

Owns the pure decision logic of the front door:

* :class:`AffinityIndex` — the router's approximate picture of each instance's prefix cache
  (an LRU set of block hashes per instance, bounded by the instance's KV capacity), so
  multi-turn sessions land where their prefix is cached;
* :func:`choose_instance` — cache-aware, load-balanced choice (SGLang-router style: take the
  instance with the longest match when it covers enough of the prompt and is not much busier
  than the least-loaded one, else the least-loaded);
* :class:`LinkEstimator` — a link's available bandwidth and its queue (modelled bytes in
  flight). The bandwidth is bytes delivered over the time the link was busy: each finished
  transfer reports its *active* intervals on the wire (first byte → last byte, less the
  stalls in which its sender had sent all the KV the pipelined prefill had produced), and
  the estimate is the bytes of the recent transfers over the union of those intervals
  (concurrent transfers share the link without being counted twice; time a transfer spent
  queued at P, or waiting for a busy prefill's next chunk, is not transfer time: counted,
  a loaded P made the link look slow, 1,250 → 43 MB/s in a main job, and every request
  relayed). The estimate never exceeds the line's rate, where that is known. A configured
  prior serves until the first sample;
* :func:`decide_pipeline` — PDD's hit-rate-aware routing: predict the TTFT of the direct
  path as P's queue (predicted prefill work ahead on P) + this prompt's prefill + the WAN
  transfer of the suffix MD lacks, ``(bytes in flight + uncached suffix bytes) / bandwidth``,
  and take the relay (P→RLD→MD) when the WAN transfer is what would break the TTFT target
  (P's queue and prefill within it; past it, the relay, which hides only the WAN, would
  not meet it either and spends RLD for nothing); or a fixed threshold
  on uncached tokens; or always / never relay. A relay without KV room for the request is
  not taken (the request goes direct instead of waiting for RLD's memory, which would stall
  its prefill). The P→RLD-only ablation finishes low-hit relayed requests on RLD.
* :class:`TokenSequencer` — merges the token streams of RLD and MD into one in-order stream
  and reports any duplicate (a seam bug) instead of hiding it.

No sockets, no clocks (callers pass durations).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Pipeline(StrEnum):
    COLOCATED = "colocated"
    PD = "P->D"
    DIRECT = "P->MD"
    RELAY = "P->RLD->MD"
    RLD_ONLY = "P->RLD"


class PipelinePolicy(StrEnum):
    HIT_RATE_AWARE = "hit-rate-aware"
    UNCACHED_THRESHOLD = "uncached-threshold"
    ALWAYS_RELAY = "always-relay"
    NEVER_RELAY = "never-relay"


@dataclass(frozen=True)
class SelectionPolicy:
    cache_aware: bool = True
    affinity_min_match: float = 0.5  # share of the prompt the best match must cover
    balance_abs: float = 4.0  # tolerated extra in-flight requests on the affine instance
    balance_rel: float = 1.5  # ... and relative factor


class _LruSet:
    """Hashes in order of last use. ``order`` lists every touch, oldest first; ``ticks[h]``
    is the absolute index in it (``base`` counts those dropped off its left end) of h's last
    touch, so an earlier copy of h in ``order`` is stale. Touching a prompt's hashes is two
    C-level bulk operations, not a linked-list move per hash."""

    __slots__ = ("base", "order", "ticks")

    def __init__(self) -> None:
        self.ticks: dict[int, int] = {}
        self.order: deque[int] = deque()
        self.base = 0

    def touch(self, hashes: Sequence[int], cap: int) -> None:
        """Mark ``hashes`` most recently used, in their order (a repeat: where its last
        occurrence puts it); then drop the least recently used beyond ``cap``."""
        ticks, order = self.ticks, self.order
        t0 = self.base + len(order)
        order.extend(hashes)
        ticks.update(zip(hashes, range(t0, t0 + len(hashes)), strict=True))
        excess = len(ticks) - cap
        if excess > 0:  # drop the oldest live ones (and the stale copies before them)
            base, popleft, tick_of = self.base, order.popleft, ticks.get
            while excess:
                h = popleft()
                if tick_of(h) == base:
                    del ticks[h]
                    excess -= 1
                base += 1
            self.base = base
        if len(order) > 8 * len(ticks) + 4096:  # mostly stale copies: keep the live ones
            live = sorted(ticks, key=ticks.__getitem__)  # (in C; ticks are distinct)
            self.order = deque(live)
            self.ticks = dict(zip(live, range(len(live)), strict=True))
            self.base = 0

    def clear(self) -> None:
        self.ticks.clear()
        self.order.clear()
        self.base = 0


class AffinityIndex:
    """Approximate per-instance prefix caches (LRU sets of chained block hashes)."""

    def __init__(self, capacity_blocks: Mapping[str, int]) -> None:
        self._cap = dict(capacity_blocks)
        self._sets: dict[str, _LruSet] = {k: _LruSet() for k in capacity_blocks}

    def match(self, instance: str, hashes: Sequence[int]) -> int:
        """Blocks of ``hashes`` believed cached on ``instance`` (binary search on the prefix)."""
        cached = self._sets[instance].ticks
        if not hashes or hashes[0] not in cached:
            return 0
        lo, hi = 1, len(hashes)  # hashes[:lo] cached
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hashes[mid - 1] in cached:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def insert(self, instance: str, hashes: Sequence[int]) -> None:
        """Mark ``hashes`` most recently used, in their order (the last one the newest)."""
        self._sets[instance].touch(hashes, self._cap[instance])

    def forget(self, instance: str) -> None:
        self._sets[instance].clear()


def choose_instance(
    loads: Mapping[str, float],
    matched_blocks: Mapping[str, int] | None,
    prompt_blocks: int,
    policy: SelectionPolicy,
) -> str:
    """Pick an instance among ``loads`` (in-flight requests per healthy instance)."""
    if not loads:
        raise ValueError("no instance to choose from")
    least = min(loads, key=lambda k: (loads[k], k))
    if not policy.cache_aware or not matched_blocks or prompt_blocks <= 0:
        return least
    best = max(loads, key=lambda k: (matched_blocks.get(k, 0), -loads[k]))
    covered = matched_blocks.get(best, 0) / prompt_blocks
    if covered >= policy.affinity_min_match and loads[best] <= (
        loads[least] * policy.balance_rel + policy.balance_abs
    ):
        return best
    return least


class LinkEstimator:
    """Available bandwidth and queue of one link, from observed transfers (modelled bytes)."""

    def __init__(
        self,
        prior_bytes_per_s: float,
        *,
        measured: bool = True,
        window: int = 16,
        min_bytes: float = 1e6,
        ceiling_bytes_per_s: float | None = None,
    ) -> None:
        self.bandwidth = prior_bytes_per_s
        self.measured = measured
        self.window = window
        self.min_bytes = min_bytes
        self.ceiling = ceiling_bytes_per_s  # the line's rate: no sample exceeds it
        self.in_flight_bytes = 0.0
        self.in_flight = 0
        self.samples = 0
        self._recent: list[tuple[tuple[tuple[float, float], ...], float]] = []  # (active, bytes)

    def started(self, modelled_bytes: float) -> None:
        self.in_flight_bytes += modelled_bytes
        self.in_flight += 1

    def finished(
        self,
        modelled_bytes: float,
        *,
        start: float,
        first_byte: float,
        last_byte: float,
        active: Sequence[Sequence[float]] | None = None,
    ) -> None:
        """A transfer ended; one big enough to measure updates the bandwidth estimate.

        ``start`` is when P admitted it (its POST), ``first_byte`` when its first byte went on
        the wire, ``last_byte`` when its last arrived; ``active``: the intervals within
        [first_byte, last_byte] in which the sender had bytes to send (absent: all of it).
        Only active time counts.
        """
        self.in_flight_bytes = max(0.0, self.in_flight_bytes - modelled_bytes)
        self.in_flight = max(0, self.in_flight - 1)
        if not self.measured or modelled_bytes < self.min_bytes or last_byte <= first_byte:
            return
        del start  # waiting at P for the prefill is not transfer time
        spans = (
            tuple((float(a), float(b)) for a, b in active if b > a)
            if active
            else ((first_byte, last_byte),)
        )
        if not spans:
            return
        self._recent.append((spans, modelled_bytes))
        del self._recent[: -self.window]
        self.samples += 1
        busy = _busy_seconds([iv for sp, _ in self._recent for iv in sp])
        rate = sum(b for _, b in self._recent) / busy
        self.bandwidth = rate if self.ceiling is None else min(rate, self.ceiling)

    def abandoned(self, modelled_bytes: float) -> None:
        """A transfer that will never report (its request failed): drop it from the queue."""
        self.in_flight_bytes = max(0.0, self.in_flight_bytes - modelled_bytes)
        self.in_flight = max(0, self.in_flight - 1)

    def predict_seconds(self, modelled_bytes: float) -> float:
        return (self.in_flight_bytes + modelled_bytes) / self.bandwidth


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of the [first, last] intervals."""
    total = 0.0
    end = float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@dataclass(frozen=True)
class RoutingPolicy:
    pipeline: PipelinePolicy = PipelinePolicy.HIT_RATE_AWARE
    ttft_target_s: float = 2.0
    uncached_threshold_tokens: int = 16384
    allow_rld_only: bool = False
    rld_only_max_hit: float = 0.5


@dataclass(frozen=True)
class PipelineInputs:
    prompt_len: int
    md_cached_tokens: int
    kv_bytes_per_token: float  # modelled
    predicted_prefill_s: float
    link: LinkEstimator
    relay_available: bool = True
    prefill_queue_s: float = 0.0  # predicted prefill work ahead of this request on P
    relay_free_tokens: int | None = None  # KV room on the roomiest relay (None: unknown)
    relay_need_tokens: int = 0  # KV the request would hold on the relay


@dataclass(frozen=True)
class PipelineDecision:
    pipeline: Pipeline
    predicted_wan_s: float
    predicted_ttft_s: float
    reason: str

    @property
    def relayed(self) -> bool:
        return self.pipeline is not Pipeline.DIRECT


def decide_pipeline(x: PipelineInputs, policy: RoutingPolicy) -> PipelineDecision:
    """P→MD or P→RLD→MD (or the P→RLD-only ablation) for one request."""
    uncached = max(0, x.prompt_len - x.md_cached_tokens)
    wan_s = x.link.predict_seconds(uncached * x.kv_bytes_per_token)
    ttft_s = x.prefill_queue_s + x.predicted_prefill_s + wan_s
    p = policy.pipeline
    if p is PipelinePolicy.ALWAYS_RELAY:
        relay, reason = True, "policy: always relay"
    elif p is PipelinePolicy.NEVER_RELAY:
        relay, reason = False, "policy: never relay"
    elif p is PipelinePolicy.UNCACHED_THRESHOLD:
        relay = uncached >= policy.uncached_threshold_tokens
        reason = f"{uncached} uncached tokens vs threshold {policy.uncached_threshold_tokens}"
    else:
        # the relay hides the WAN transfer only: P's queue and the prefill are paid on
        # either pipeline, so relay when the WAN is what breaks the target
        local_s = x.prefill_queue_s + x.predicted_prefill_s
        relay = ttft_s > policy.ttft_target_s and local_s <= policy.ttft_target_s
        reason = (
            f"predicted TTFT {ttft_s:.3f}s (P queue {x.prefill_queue_s:.3f}s + prefill "
            f"{x.predicted_prefill_s:.3f}s + WAN {wan_s:.3f}s) vs target "
            f"{policy.ttft_target_s:.3f}s"
        )
        if ttft_s > policy.ttft_target_s and not relay:
            reason += (
                f"; P queue + prefill {local_s:.3f}s already past the target: "
                "the relay would not meet it"
            )
    if relay and not x.relay_available:
        relay, reason = False, reason + "; no relay instance available"
    elif relay and x.relay_free_tokens is not None and x.relay_free_tokens < x.relay_need_tokens:
        relay = False
        reason += (
            f"; relay full ({x.relay_free_tokens} tokens of KV room, needs "
            f"{x.relay_need_tokens}): direct instead of stalling the prefill"
        )
    if not relay:
        return PipelineDecision(Pipeline.DIRECT, wan_s, ttft_s, reason)
    hit = x.md_cached_tokens / x.prompt_len if x.prompt_len else 1.0
    if policy.allow_rld_only and hit <= policy.rld_only_max_hit:
        return PipelineDecision(
            Pipeline.RLD_ONLY, wan_s, ttft_s, reason + f"; MD hit {hit:.2f} -> finish on RLD"
        )
    return PipelineDecision(Pipeline.RELAY, wan_s, ttft_s, reason)


class SeamError(Exception):
    """A token position arrived twice: a duplicate at a handoff seam (``ready``: the runs
    of the same offer that were released before it)."""

    def __init__(self, message: str, ready: list[Run] | None = None) -> None:
        super().__init__(message)
        self.ready = ready or []


Run = tuple[int, list[int], str]  # (first position, token ids, origin): consecutive tokens


class TokenSequencer:
    """Merges per-position tokens from several sources into one in-order stream."""

    def __init__(self) -> None:
        self.next_position = 0
        self._buffer: dict[int, tuple[int, str]] = {}
        self.by_origin: dict[str, int] = {}

    def offer(self, position: int, token: int, origin: str) -> list[tuple[int, int, str]]:
        """Accept one token; returns the tokens now ready, in order."""
        runs = self.offer_run(position, [token], origin)
        return [(p + i, t, o) for p, ts, o in runs for i, t in enumerate(ts)]

    def offer_run(self, first: int, tokens: list[int], origin: str) -> list[Run]:
        """Accept the tokens at positions ``first``, ``first + 1``, ... from one source
        (one step's); returns the runs now ready, in order (a run that continues the
        stream, the usual case, as it came: no work per token)."""
        buf = self._buffer
        by = self.by_origin
        if not buf and first == self.next_position and tokens:
            self.next_position = first + len(tokens)
            by[origin] = by.get(origin, 0) + len(tokens)
            return [(first, tokens, origin)]
        ready: list[Run] = []
        for i, token in enumerate(tokens):
            position = first + i
            if position < self.next_position or position in buf:
                why = f"token position {position} arrived twice (second from {origin})"
                raise SeamError(why, ready)
            if position != self.next_position:
                buf[position] = (token, origin)
                continue
            t, o = token, origin
            while True:
                if ready and ready[-1][2] == o:
                    ready[-1][1].append(t)
                else:
                    ready.append((self.next_position, [t], o))
                by[o] = by.get(o, 0) + 1
                self.next_position += 1
                if self.next_position not in buf:
                    break
                t, o = buf.pop(self.next_position)
        return ready

    @property
    def waiting(self) -> int:
        return len(self._buffer)
