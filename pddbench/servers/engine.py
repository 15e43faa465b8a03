"""Continuous-batching scheduler of one instance (sans-IO): admission, batching, modelled steps.

Owns what a serving engine decides, without sockets or clocks (callers pass ``now``):

* **admission** — FIFO; a request is admitted when its KV fits: the longest cached prefix is
  matched and pinned, the rest (uncached prompt + reserved output) is allocated from the
  :class:`~pddbench.servers.radix.KvPool`, evicting LRU unpinned blocks if needed; a request
  that can never fit is refused at once;
* **batching** — each step is one forward pass: the decode batch (up to ``max_batch``
  sequences, one token each; with speculative decoding each verifies ``draft_tokens``,
  priced as an extend of that many, and emits 1 + its accepted drafts, see
  :mod:`pddbench.servers.speculative`), pending extend segments, and prefill chunks
  (``chunk_tokens`` budget, packed across sequences as SGLang does by default, so a short
  last chunk shares its step with the next prompt; ``prefill_packing = false`` gives each
  sequence its own steps). Pending extends (Extend-Decode handoffs) run as a forward pass of
  their own, queued behind the step in flight, as SGLang schedules an extend batch apart
  from its decode batch (``mixed_extend`` mixes them instead); the step's duration comes from
  :func:`pddbench.servers.compute.step_cost`;
* **progress** — when the caller reports that a step's modelled time has elapsed,
  ``complete`` advances the sequences and returns events (tokens, prefill progress, ...).

Position bookkeeping (shared with the handoff logic): ``processed`` is the index of the last
output token this instance produced; a decode step consumes it and produces
``processed + 1`` (and, speculating, up to ``draft_tokens - 1`` more, each emitted as its
own :class:`TokenOut` at the step's end); an extend segment of ``k`` tokens consumes ``k``
known tokens and produces the next one. Token ids come from
:class:`~pddbench.servers.tokens.TokenStream`.

Must not do I/O, read clocks, or know about other instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pddbench.servers.compute import Machine, price_sums, segment_sums
from pddbench.servers.radix import KvPool, Node
from pddbench.servers.speculative import OFF, Speculation, draw_key, step_tokens
from pddbench.servers.tokens import TokenStream


class Phase(StrEnum):
    QUEUED = "queued"  # waiting for KV memory
    PREFILL = "prefill"  # admitted; prompt being computed here
    AWAIT_KV = "await-kv"  # admitted; waiting for prompt KV from a prefill instance
    HOLD = "hold"  # has KV, not decoding (P after prefill, MD waiting for a handoff)
    EXTEND = "extend"  # an extend segment is pending
    DECODE = "decode"  # in the running batch
    DONE = "done"


# the phases the step loops test, as module names: an enum member's attribute access costs
# ~65 ns in Python 3.11, a global's ~10
_PREFILL, _EXTEND, _DECODE, _DONE = Phase.PREFILL, Phase.EXTEND, Phase.DECODE, Phase.DONE


@dataclass(frozen=True)
class SchedulerConfig:
    chunk_tokens: int = 8192
    prefill_packing: bool = True
    mixed_extend: bool = False
    max_batch: int = 256
    step_overhead_s: float = 0.0005
    hbm_reserve_fraction: float = 0.1
    speculation: Speculation = OFF  # draft + verify per decode step (off: 1 token)


@dataclass(eq=False)
class Seq:
    """One request on one instance."""

    rid: str
    prompt_len: int
    hashes: Sequence[int]  # chained hashes of the prompt's full blocks
    stream: TokenStream
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = True
    compute_prompt: bool = False  # prefill runs here (prefill / colocated roles)
    decode_after_kv: bool = True  # after the prompt KV is here: decode (else HOLD)
    reserve_output: int = 0  # output tokens of KV to reserve at admission
    use_cache: bool = True
    seed: int = 0  # the run seed: with the rid, seeds the speculative-decoding draws
    draw_key: int = 0  # ... as one key (speculative.draw_key), set at submit
    # state
    phase: Phase = Phase.QUEUED
    cached: int = 0
    computed: int = 0
    processed: int = -1
    next_emit: int = 0  # one past the last position this instance emitted
    pending_extend: int = 0
    extend_final: bool = False
    node: Node | None = None
    private: int = 0
    held: int = 0  # KV tokens this request holds against the instance's capacity
    chunks: int = 0
    t_submit: float = 0.0
    t_admit: float | None = None
    t_prefill_start: float | None = None
    t_prefill_end: float | None = None
    finish_reason: str | None = None


# -- events ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Admitted:
    rid: str
    cached: int
    t: float


@dataclass(frozen=True, slots=True)
class Refused:
    rid: str
    message: str


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    rid: str
    computed: int  # prompt tokens with KV here
    t: float


@dataclass(frozen=True, slots=True)
class PrefillDone:
    rid: str
    start: float
    end: float
    chunks: int


@dataclass(slots=True)  # not frozen: one per output token, and frozen costs ~6x to build
class TokenOut:
    rid: str
    position: int
    token: int
    t: float
    finish: str | None  # "length" | "stop" | None


@dataclass(frozen=True, slots=True)
class ExtendDone:
    rid: str
    processed: int
    k: int
    start: float
    end: float


Event = Admitted | Refused | PrefillProgress | PrefillDone | TokenOut | ExtendDone


@dataclass(slots=True)
class Step:
    start: float
    duration: float
    prefill: list[tuple[Seq, int]] = field(default_factory=list)
    extend: list[tuple[Seq, int]] = field(default_factory=list)
    decode: list[Seq] = field(default_factory=list)
    bound: str = "overhead"


@dataclass
class EngineStats:
    steps: int = 0
    busy_s: float = 0.0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    extend_tokens: int = 0
    cache_query_tokens: int = 0
    cache_hit_tokens: int = 0
    refused: int = 0


class Engine:
    """The scheduler of one instance."""

    def __init__(self, machine: Machine, pool: KvPool, cfg: SchedulerConfig) -> None:
        self.machine = machine
        self.pool = pool
        self.cfg = cfg
        self.block_size = pool.block_size
        self.seqs: dict[str, Seq] = {}
        self._queue: list[Seq] = []  # waiting for admission, FIFO
        self._prefill: list[Seq] = []  # admitted, prompt being computed, FIFO
        self._running: dict[str, Seq] = {}  # DECODE / EXTEND, admission order
        self._held_tokens = 0  # prompt + reserved output of admitted requests
        self.stats = EngineStats()

    # -- introspection ------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return len(self._queue) + len(self._prefill)

    @property
    def running(self) -> int:
        return len(self._running)

    def load(self) -> float:
        """How saturated this instance is, in [0, inf): the largest of its KV memory held by
        requests (their reservations and pinned prefixes, against capacity — so sequences
        held against what memory allows), its decode batch against ``max_batch``, and 1.0 or
        more while requests wait in the queue for memory."""
        cap = self.pool.capacity_tokens
        memory = self._held_tokens / cap if cap else 1.0
        batch = len(self._running) / self.cfg.max_batch
        load = max(memory, batch)
        return max(load, 1.0) if self._queue else load

    def has_work(self) -> bool:
        return bool(self._prefill or self._running or self._queue)

    # -- requests -----------------------------------------------------------------------
    def submit(self, seq: Seq, now: float) -> list[Event]:
        if seq.rid in self.seqs:
            return [Refused(seq.rid, f"request {seq.rid} is already on this instance")]
        need = seq.prompt_len + seq.reserve_output
        if need > self.pool.capacity_tokens:
            self.stats.refused += 1
            return [
                Refused(
                    seq.rid,
                    f"request needs {need} tokens of KV but the instance holds at most "
                    f"{self.pool.capacity_tokens}",
                )
            ]
        seq.t_submit = now
        seq.phase = Phase.QUEUED
        if self.cfg.speculation.enabled:
            seq.draw_key = draw_key(seq.seed, seq.rid)
        self.seqs[seq.rid] = seq
        self._queue.append(seq)
        return self.admit(now)

    def admit(self, now: float) -> list[Event]:
        """Admit queued requests, oldest first, while their KV fits."""
        out: list[Event] = []
        bs = self.block_size
        while self._queue:
            seq = self._queue[0]
            cached = 0
            node = None
            if seq.use_cache:
                limit = (seq.prompt_len - 1) // bs
                match = self.pool.tree.match(seq.hashes[:limit])
                node = match.node
                self.pool.tree.pin(node)
                cached = match.blocks * bs
            need = seq.prompt_len - cached + seq.reserve_output
            if not self.pool.reserve(need):
                if node is not None:
                    self.pool.tree.unpin(node)
                break
            self._queue.pop(0)
            seq.node, seq.cached, seq.computed, seq.private = node, cached, cached, need
            seq.t_admit = now
            seq.held = seq.prompt_len + seq.reserve_output
            self._held_tokens += seq.held
            self.stats.cache_query_tokens += seq.prompt_len
            self.stats.cache_hit_tokens += cached
            if seq.compute_prompt:
                seq.phase = Phase.PREFILL
                self._prefill.append(seq)
            else:
                seq.phase = Phase.AWAIT_KV
            out.append(Admitted(seq.rid, cached, now))
        return out

    def kv_landed(self, rid: str, now: float) -> list[Event]:
        """The prompt's KV arrived from a prefill instance."""
        seq = self.seqs.get(rid)
        if seq is None or seq.phase is not Phase.AWAIT_KV:
            return []
        seq.computed = seq.prompt_len
        self._commit_prompt(seq)
        seq.processed = 0
        if seq.decode_after_kv:
            return self._start_decoding(seq, now)
        seq.phase = Phase.HOLD
        return []

    def extend(self, rid: str, k: int, final: bool, now: float) -> list[Event]:
        """Queue an extend segment of ``k`` known tokens (Extend-Decode handoff).

        With ``final`` the step that processes them produces and emits the next token and
        the sequence keeps decoding; ``k == 0`` with ``final`` emits the already-known token
        at ``processed`` at once.
        """
        seq = self.seqs[rid]
        if seq.phase is not Phase.HOLD:
            raise ValueError(f"extend of {rid} in phase {seq.phase}")
        if k == 0:
            if not final:
                return []
            return self._start_decoding(seq, now)
        seq.pending_extend = k
        seq.extend_final = final
        seq.phase = Phase.EXTEND
        self._running[rid] = seq
        return []

    def adopt(self, rid: str, seam: int, now: float) -> list[Event]:
        """KV of the tokens before ``seam - 1`` arrived with a KV handoff: decode from there."""
        seq = self.seqs[rid]
        if seq.phase is not Phase.HOLD:
            raise ValueError(f"adopt of {rid} in phase {seq.phase}")
        if seam == 0:
            return self._start_decoding(seq, now)
        seq.processed = seam - 1
        seq.next_emit = seam
        seq.phase = Phase.DECODE
        self._running[rid] = seq
        return []

    def release(self, rid: str) -> None:
        """Drop a request and free its KV (finished elsewhere, aborted, or P done sending)."""
        seq = self.seqs.pop(rid, None)
        if seq is None:
            return
        if seq.phase is Phase.QUEUED:
            self._queue.remove(seq)
        elif seq.phase is Phase.PREFILL:
            self._prefill.remove(seq)
        self._running.pop(rid, None)
        self._free(seq)

    # -- stepping -----------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        """The next forward pass, or None when there is nothing to run."""
        cfg = self.cfg
        prefill: list[tuple[Seq, int]] = []
        extend: list[tuple[Seq, int]] = []
        decode: list[Seq] = []
        # the step's shape as price_sums takes it (price's sums, added up as we batch)
        t_prefill = pairs_p = kv_prefill = t_extend = pairs_d = kv_decode = batch = ctx_sum = 0
        running = self._running.values()
        extending = False
        if not cfg.mixed_extend:
            for s in running:
                if s.phase is _EXTEND:
                    extending = True
                    break
        draft = cfg.speculation.draft_tokens
        max_batch = cfg.max_batch
        for seq in running:
            if seq.phase is _EXTEND:
                k = seq.pending_extend
                extend.append((seq, k))
                pairs, kv = segment_sums(k, seq.computed + seq.processed)
                pairs_d += pairs
                kv_decode += kv
                t_extend += k
            elif extending:
                continue  # an extend batch is a forward pass of its own; decode waits for it
            elif batch < max_batch:
                decode.append(seq)
                batch += 1
                ctx_sum += seq.computed + seq.processed + 1
        if draft > 1:  # each verifies `draft` tokens: an extend of them on top of its context
            pairs, kv = segment_sums(draft, ctx_sum - batch, batch)
            pairs_d += pairs
            kv_decode += kv
            t_extend += batch * draft
            ctx_sum = 0
        budget = cfg.chunk_tokens - batch * draft
        for seq in self._prefill:
            if budget <= 0:
                break
            n = min(budget, seq.prompt_len - seq.computed)
            prefill.append((seq, n))
            pairs, kv = segment_sums(n, seq.computed)
            pairs_p += pairs
            kv_prefill += kv
            t_prefill += n
            budget -= n
            if seq.t_prefill_start is None:
                seq.t_prefill_start = now
            if not cfg.prefill_packing:
                break
        if not (prefill or extend or decode):
            return None
        plain = batch if draft == 1 else 0
        sums = (t_prefill, pairs_p, kv_prefill, t_extend, pairs_d, kv_decode)
        cost = price_sums(self.machine, *sums, plain, ctx_sum)  # step_cost of the step's shape
        return Step(now, cost.seconds, prefill, extend, decode, cost.bound)

    def complete(self, step: Step, now: float) -> list[Event]:
        """The step's modelled time has elapsed: advance its sequences."""
        self.stats.steps += 1
        self.stats.busy_s += step.duration
        out: list[Event] = []
        for seq, n in step.prefill:
            if seq.phase is not _PREFILL:
                continue  # released meanwhile
            seq.computed += n
            seq.chunks += 1
            self.stats.prefill_tokens += n
            out.append(PrefillProgress(seq.rid, seq.computed, now))
            if seq.computed >= seq.prompt_len:
                self._prefill.remove(seq)
                seq.t_prefill_end = now
                self._commit_prompt(seq)
                assert seq.t_prefill_start is not None
                out.append(PrefillDone(seq.rid, seq.t_prefill_start, now, seq.chunks))
                seq.processed = 0
                if seq.decode_after_kv:
                    out.extend(self._start_decoding(seq, now))
                else:
                    seq.phase = Phase.HOLD
        for seq, k in step.extend:
            if seq.phase is not _EXTEND:
                continue
            seq.processed += k
            seq.pending_extend = 0
            self.stats.extend_tokens += k
            out.append(ExtendDone(seq.rid, seq.processed, k, step.start, now))
            if seq.extend_final:
                seq.phase = _DECODE
                seq.next_emit = seq.processed
                out.append(self._emit(seq, now))
            else:
                seq.phase = Phase.HOLD
                self._running.pop(seq.rid, None)
        spec = self.cfg.speculation
        speculating = spec.draft_tokens > 1
        emit = self._emit
        append = out.append
        decoded = 0
        for seq in step.decode:
            if seq.phase is not _DECODE:
                continue
            # accepted drafts (one token without speculation), never past the request's
            # last output position
            processed = seq.processed
            n = seq.max_tokens - 1 - processed
            drafted = step_tokens(spec, seq.draw_key, processed + 1) if speculating else 1
            if drafted < n:
                n = drafted
            for _ in range(n):
                seq.processed += 1
                decoded += 1
                append(emit(seq, now))
                if seq.phase is _DONE:  # EOS among the accepted tokens
                    break
        self.stats.decode_tokens += decoded
        return out

    # -- internals ----------------------------------------------------------------------
    def _start_decoding(self, seq: Seq, now: float) -> list[Event]:
        seq.phase = _DECODE
        seq.next_emit = seq.processed
        self._running[seq.rid] = seq
        return [self._emit(seq, now)]

    def _emit(self, seq: Seq, now: float) -> TokenOut:
        pos = seq.processed
        stream = seq.stream
        finish = None
        if not seq.ignore_eos and pos >= seq.min_tokens and stream.is_eos(pos):
            token = stream.eos_token
            finish = "stop"
        else:
            token = stream.token(pos)
            if pos + 1 >= seq.max_tokens:
                finish = "length"
        seq.next_emit = pos + 1
        if finish is not None:
            seq.finish_reason = finish
            seq.phase = _DONE
            self.seqs.pop(seq.rid, None)
            self._running.pop(seq.rid, None)
            self._free(seq)
        return TokenOut(seq.rid, pos, token, now, finish)

    def _commit_prompt(self, seq: Seq) -> None:
        if not seq.use_cache:
            return
        full = seq.prompt_len // self.block_size
        node, moved = self.pool.commit(seq.hashes[:full], seq.cached, seq.node)
        seq.private -= moved
        self.pool.tree.pin(node)
        if seq.node is not None:
            self.pool.tree.unpin(seq.node)
        seq.node = node

    def _free(self, seq: Seq) -> None:
        self._held_tokens -= seq.held
        seq.held = 0
        if seq.node is not None:
            self.pool.tree.unpin(seq.node)
            seq.node = None
        if seq.private:
            self.pool.release(seq.private)
            seq.private = 0
        seq.phase = Phase.DONE
