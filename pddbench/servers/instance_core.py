"""What a worker instance decides about its requests (sans-IO).

Owns the per-request state of one instance (:class:`JobCore`) and every rule that turns
the engine's events and the peers' messages into the instance's next moves, returned as
:data:`Effect` s for a driver to carry out:

* engine events → the request's events and tokens for the router; P starts its KV senders
  when a request is admitted and feeds them as chunks complete; a request that ends
  finishes (P: when its last KV transfer reports, then releases its KV);
* a decoder's KV arriving: ``main-auto`` becomes ``main`` (a relayed request) or
  ``direct``; the engine takes the KV; MD tells RLD it is ready, a relay tries a handoff;
* RLD's handoff, once per step boundary: what :class:`~pddbench.servers.handoff.RelayHandoff`
  decides from what RLD emitted and its engine's load; a final batch releases RLD's KV; the
  request ending on RLD sends MD the ``finished`` notice;
* MD's side: what :class:`~pddbench.servers.handoff.MainHandoff` says a batch means —
  extend, adopt (KV ablation), retire (finished on RLD) — and the level it acknowledges.

Drivers: the asyncio instance (:mod:`~pddbench.servers.instance`,
:mod:`~pddbench.servers.instance_handoff`) and the twin. Must not do I/O or read clocks
(callers pass ``now``); an effect is decided when it is returned, so a driver carries each
one out as it is (an event of a request already finished is never returned).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pddbench.servers import protocol as proto
from pddbench.servers.config import DeploymentConfig, InstanceConfig, Role
from pddbench.servers.engine import (
    Admitted,
    Engine,
    Event,
    ExtendDone,
    Phase,
    PrefillDone,
    PrefillProgress,
    Refused,
    Seq,
    TokenOut,
)
from pddbench.servers.handoff import (
    Action,
    Adopt,
    Batch,
    Extend,
    HandoffError,
    HandoffPolicy,
    MainHandoff,
    NotifyReady,
    RelayHandoff,
    Retire,
)
from pddbench.servers.tokens import TokenStream


def seq_for(
    dep: DeploymentConfig,
    inst: InstanceConfig,
    spec: proto.GenerateSpec | proto.DecodeSpec | proto.PrefillSpec,
    stream: type[TokenStream] = TokenStream,
) -> Seq:
    """The engine sequence of a request on ``inst``: P computes the prompt and holds its KV
    for the transfers; C computes and decodes; a decoder waits for the KV, then decodes
    (``main-auto``: holds it until it learns whether the request is relayed). ``stream``:
    the class of its output (a driver whose client never reads token ids may pass one that
    does not compute them; EOS draws stay the same)."""
    vocab = dep.machine(inst).model.vocab_size
    if isinstance(spec, proto.PrefillSpec):
        return Seq(
            rid=spec.rid,
            prompt_len=spec.prompt_len,
            hashes=spec.hashes,
            stream=stream(spec.seed, spec.rid, vocab),
            max_tokens=1,
            compute_prompt=True,
            decode_after_kv=False,
            reserve_output=0,
            use_cache=inst.prefix_cache,
        )
    colocated = isinstance(spec, proto.GenerateSpec)
    waits = isinstance(spec, proto.DecodeSpec) and spec.mode == "main-auto"
    return Seq(
        rid=spec.rid,
        prompt_len=spec.prompt_len,
        hashes=spec.hashes,
        stream=stream(spec.seed, spec.rid, vocab, dep.eos_probability),
        max_tokens=spec.max_tokens,
        min_tokens=spec.min_tokens,
        ignore_eos=spec.ignore_eos,
        compute_prompt=colocated,
        decode_after_kv=not waits,
        reserve_output=spec.max_tokens,
        use_cache=inst.prefix_cache,
        seed=spec.seed,
    )


@dataclass(eq=False)
class JobCore:
    """One request on one instance: what the rules read and change."""

    rid: str
    seq: Seq
    finished: bool = False
    released: bool = False
    mode: str = "direct"
    relay: RelayHandoff | None = None
    main: MainHandoff | None = None
    peer_address: str | None = None
    peer_instance: str | None = None
    senders: int = 0  # P: its KV transfers
    senders_left: int = 0  # ... not yet reported
    kv_landed: bool = False


# -- effects -------------------------------------------------------------------------------
class Do(StrEnum):
    EMIT = "emit"  # push event ``ev`` (``fields``) of the request to the router
    TOKEN = "token"  # push output tokens ``tokens`` at positions ``n``, ``n + 1``, ...
    START_SENDERS = "start-senders"  # P: admitted; start its KV transfers (``n`` tokens there)
    FEED_SENDERS = "feed-senders"  # P: the KV of the first ``n`` prompt tokens exists
    SEND_HANDOFF = "send-handoff"  # RLD: send ``batch`` to MD
    NOTIFY_MD = "notify-md"  # MD: tell RLD it holds the prompt KV (level 0)
    ACK = "ack"  # MD: answer the handoff messages waiting on the job with level ``n``
    # ended here (``done`` emitted): answer waiting messages with level ``n``; ``linger``:
    # keep the job reachable a while (an RLD that handed off before its own KV landed
    # accepts and discards the late transfer instead of refusing it)
    FINISHED = "finished"
    ABORTED = "aborted"  # dropped here, its KV freed: stop whatever I/O it still has
    KICK = "kick"  # the engine has new work or freed memory


@dataclass(slots=True)  # not frozen: one per output token, and frozen costs ~6x to build
class Effect:
    """One thing the core decided a driver must do now."""

    do: Do
    job: JobCore | None = None
    n: int = 0
    tokens: list[int] | None = None  # TOKEN: a run (one request's, of one step)
    ev: str = ""
    fields: dict[str, Any] | None = None
    batch: Batch | None = None
    linger: bool = False


KICK = Effect(Do.KICK)
_TOKEN = Do.TOKEN  # an enum member's attribute access costs ~65 ns in Python 3.11


@dataclass
class InstanceCore:
    role: Role
    engine: Engine
    policy: HandoffPolicy
    jobs: dict[str, JobCore] = field(default_factory=dict)

    # -- requests -------------------------------------------------------------------------
    def accept(self, job: JobCore) -> str | None:
        """Register a request; the reason it is refused, if it is."""
        if job.rid in self.jobs:
            return f"request {job.rid} already on this instance"
        self.jobs[job.rid] = job
        return None

    def submit(self, job: JobCore, now: float) -> list[Effect]:
        return [*self.dispatch(self.engine.submit(job.seq, now), now), KICK]

    def relay_mode(self, job: JobCore, peer_address: str | None, peer_instance: str | None) -> None:
        """A decode request in relay mode: RLD hands it off to MD at ``peer_address``."""
        job.mode = "relay"
        job.relay = RelayHandoff(self.policy)
        job.peer_address, job.peer_instance = peer_address, peer_instance

    def emit(self, job: JobCore, ev: str, **fields: Any) -> list[Effect]:
        return [] if job.finished else [Effect(Do.EMIT, job, ev=ev, fields=fields)]

    # -- engine events --------------------------------------------------------------------
    def dispatch(self, events: list[Event], now: float) -> list[Effect]:
        out: list[Effect] = []
        # A relay decides its handoff once per step boundary, after all of the step's tokens
        # (speculative decoding emits several per request): deciding at the first of them
        # would count tokens whose last one may end the request.
        relays: dict[str, JobCore] = {}
        job_of = self.jobs.get
        run: Effect | None = None  # the last TOKEN effect built: a run is extended while it
        run_tokens: list[int] = []  # is the last effect out, of the same job, contiguous
        for ev in events:
            job = job_of(ev.rid)
            if job is None:
                continue
            if type(ev) is TokenOut:
                if not job.finished:  # a step's tokens of one request: one run
                    if (
                        run is not None
                        and run.job is job
                        and out[-1] is run
                        and run.n + len(run_tokens) == ev.position
                    ):
                        run_tokens.append(ev.token)
                    else:
                        run_tokens = [ev.token]
                        run = Effect(_TOKEN, job, ev.position, run_tokens)
                        out.append(run)
                if ev.finish is not None:
                    if job.relay is not None and job.peer_address:
                        batch = job.relay.finish(ev.position + 1)
                        if batch is not None:
                            out.append(Effect(Do.SEND_HANDOFF, job, batch=batch))
                    out += self.finish(job, ev.finish, now, emitted=ev.position + 1)
                elif job.relay is not None:
                    relays[job.rid] = job
            elif isinstance(ev, Admitted):
                out += self.emit(job, "admitted", t=ev.t, cached=ev.cached)
                if job.senders:
                    out.append(Effect(Do.START_SENDERS, job, job.seq.computed))
            elif isinstance(ev, PrefillProgress):
                if job.senders:
                    out.append(Effect(Do.FEED_SENDERS, job, ev.computed))
            elif isinstance(ev, PrefillDone):
                seq = job.seq
                done = {"start": ev.start, "end": ev.end, "chunks": ev.chunks}
                uncached = seq.prompt_len - seq.cached
                out += self.emit(job, "prefill", **done, cached=seq.cached, uncached=uncached)
            elif isinstance(ev, ExtendDone):
                final = job.main is not None and job.main.pending_final
                out += self.emit(job, "extend", k=ev.k, start=ev.start, end=ev.end, final=final)
                out += self.main_applied(job, ev.processed, now)
            elif isinstance(ev, Refused):
                out += self.fail(job, "refused", ev.message)
        for job in relays.values():
            out += self.relay_try(job, now)
        return out

    # -- P --------------------------------------------------------------------------------
    def expect_senders(self, job: JobCore, targets: int) -> None:
        """P: the request's KV goes to ``targets`` receivers."""
        job.senders = job.senders_left = targets

    def sender_done(self, job: JobCore, now: float) -> list[Effect]:
        """One of P's KV transfers reported (sent or failed)."""
        job.senders_left -= 1
        if job.senders_left == 0 and not job.finished:
            return self.finish(job, "prefilled", now)
        return []

    # -- decoders -------------------------------------------------------------------------
    def kv_mode(
        self, job: JobCore, mode: str, relay_address: str | None, relay_id: str | None
    ) -> None:
        """The prompt KV's transfer announced its mode: ``main`` (relayed) or ``direct``."""
        if job.mode != "main-auto":
            return
        if mode == "main":
            job.mode, job.main = "main", MainHandoff()
            job.peer_address, job.peer_instance = relay_address, relay_id
        else:
            job.mode = "direct"
            job.seq.decode_after_kv = True

    def kv_arrived(self, job: JobCore, receipt: dict[str, Any], now: float) -> list[Effect] | None:
        """The prompt KV is here (``receipt``: the kv_landed event's fields, ``end`` its
        arrival). None: the request is gone, the KV is discarded."""
        job.kv_landed = True
        if job.released or job.finished:
            self.jobs.pop(job.rid, None)
            return None
        out = self.emit(job, "kv_landed", **receipt)
        out += self.dispatch(self.engine.kv_landed(job.rid, float(receipt["end"])), now)
        if job.main is not None:
            out += self.main_act(job, job.main.kv_landed(), now)
        elif job.relay is not None:
            out += self.relay_try(job, now)
        out.append(KICK)
        return out

    # -- RLD ------------------------------------------------------------------------------
    def md_ready(self, job: JobCore, level: int, now: float) -> list[Effect]:
        """MD holds the prompt KV (level 0); raises HandoffError if that breaks the protocol."""
        assert job.relay is not None
        job.relay.md_ready(level)
        return [*self.emit(job, "md_ready", level=level, t=now), *self.relay_try(job, now)]

    def relay_try(self, job: JobCore, now: float) -> list[Effect]:
        assert job.relay is not None
        if job.finished or job.released:
            return []
        seq = job.seq
        emitted = seq.next_emit if seq.phase in (Phase.DECODE, Phase.DONE) else 0
        try:
            batch = job.relay.decide(emitted, self.engine.load())
        except HandoffError as exc:
            return self.fail(job, "handoff", str(exc))
        if batch is None:
            return []
        out: list[Effect] = []
        if batch.final:
            job.released = True
            self.engine.release(job.rid)
            out.append(KICK)
        out.append(Effect(Do.SEND_HANDOFF, job, batch=batch))
        return out

    def handoff_acked(self, job: JobCore, batch: Batch, level: Any, now: float) -> list[Effect]:
        """MD acknowledged ``batch`` (``level``: its reply's level)."""
        if batch.final:
            return [] if batch.finished else self.finish(job, "handed-off", now, emitted=batch.end)
        assert job.relay is not None
        try:
            job.relay.md_ready(int(level))
        except (HandoffError, TypeError, ValueError) as exc:
            return self.fail(job, "handoff", f"bad handoff acknowledgement: {exc}")
        return self.relay_try(job, now)

    # -- MD -------------------------------------------------------------------------------
    def handoff_from(self, job: JobCore, rld_address: str, rld_instance: str) -> None:
        """A relay's message overtook the KV transfer's headers: a relayed request."""
        if job.main is None and job.mode == "main-auto":
            job.mode, job.main = "main", MainHandoff()
            job.peer_address, job.peer_instance = rld_address, rld_instance

    def handoff_arrived(self, job: JobCore, batch: Batch) -> Action | None:
        """A batch from RLD: what it means (None: wait for the prompt KV); raises
        HandoffError when it breaks the protocol."""
        if job.main is None:
            raise HandoffError(f"no main decode of {job.rid} here")
        return job.main.on_batch(batch)

    def main_act(self, job: JobCore, action: Action, now: float) -> list[Effect]:
        main = job.main
        assert main is not None
        if isinstance(action, NotifyReady):
            if action.level == 0:
                return [Effect(Do.NOTIFY_MD, job)]
            return [Effect(Do.ACK, job, action.level)]
        if isinstance(action, Retire):
            job.released = True
            self.engine.release(job.rid)
            return [
                *self.finish(job, "finished-on-relay", now),
                Effect(Do.ACK, job, main.level),
                KICK,
            ]
        if isinstance(action, Extend):
            out = self.dispatch(self.engine.extend(job.rid, action.k, action.final, now), now)
            if action.k == 0:
                out += self.main_applied(job, main.level, now)
            return [*out, KICK]
        assert isinstance(action, Adopt)
        out = self.dispatch(self.engine.adopt(job.rid, action.seam, now), now)
        return [*out, *self.main_applied(job, action.seam, now), KICK]

    def main_applied(self, job: JobCore, level: int, now: float) -> list[Effect]:
        assert job.main is not None
        nxt = job.main.applied(level)
        if nxt is not None:
            return self.main_act(job, nxt, now)
        return [Effect(Do.ACK, job, level)]

    # -- endings --------------------------------------------------------------------------
    def finish(
        self, job: JobCore, reason: str, now: float, *, emitted: int | None = None
    ) -> list[Effect]:
        out = self.emit(job, "done", reason=reason, t=now, emitted=emitted)
        job.finished = True
        if self.role is Role.PREFILL:
            self.engine.release(job.rid)
            out.append(KICK)
        linger = job.released and not job.kv_landed and self.role is Role.RELAY_DECODE
        if not linger:
            self.jobs.pop(job.rid, None)
        level = job.main.level if job.main is not None else 0
        out.append(Effect(Do.FINISHED, job, level, linger=linger))
        return out

    def fail(self, job: JobCore, kind: str, message: str) -> list[Effect]:
        if job.finished:
            return []
        return [*self.emit(job, "error", kind=kind, message=message), *self.abort(job)]

    def abort(self, job: JobCore) -> list[Effect]:
        job.finished = True
        job.released = True
        self.jobs.pop(job.rid, None)
        self.engine.release(job.rid)
        return [Effect(Do.ABORTED, job), KICK]
