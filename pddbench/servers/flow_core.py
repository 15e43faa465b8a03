"""One request's journey through a deployment, as decided by the router (sans-IO).

Owns the per-request choreography of every system as a state machine that a driver feeds
with the instances' events and whose :class:`Open` / :class:`Drop` actions it carries out:

* colocated: C;
* PD: reserve on D, then prefill on P with D as its KV target;
* PDD: reserve on MD, decide the pipeline from MD's matched prefix, P's predicted backlog,
  the link estimate and the relay's room (:func:`~pddbench.servers.routing.decide_pipeline`),
  reserve on RLD if relayed, then prefill on P with one (direct, RLD-only) or two (relay)
  KV targets;

and the bookkeeping behind the router's next decisions: loads and KV held per instance,
P's backlog until its prefill is reported, the WAN link estimator's in-flight bytes and
samples, the affinity index. It merges the token streams of RLD and MD in position order,
fills the request's :class:`~pddbench.servers.story.RequestStory` and raises
:class:`~pddbench.servers.router_core.RequestFailed` on any error event.

Drivers: the asyncio flow (:mod:`~pddbench.servers.flows`) and the twin. Must not do I/O or
read clocks (callers pass ``now``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pddbench.servers import protocol as proto
from pddbench.servers.config import Architecture, InstanceConfig, Role
from pddbench.servers.router_core import RequestFailed, RouterCore
from pddbench.servers.routing import (
    LinkEstimator,
    Pipeline,
    PipelineInputs,
    Run,
    SeamError,
    TokenSequencer,
    decide_pipeline,
)
from pddbench.servers.story import RequestStory

ORIGIN = {"C": "C", "D": "D", "MD": "MD", "RLD": "RLD"}
GENERATE, DECODE, PREFILL = "/internal/generate", "/internal/decode", "/internal/prefill"


class Counters(Protocol):
    """What a flow counts on its router (the servers' metrics, the twin's tallies)."""

    def routed(self, pipeline: str) -> None: ...
    def seam_error(self) -> None: ...
    def handoff(self, mode: str) -> None: ...


@dataclass
class Tally:
    """A plain :class:`Counters`."""

    pipelines: dict[str, int] = field(default_factory=dict)
    seam_errors: int = 0
    handoffs: dict[str, int] = field(default_factory=dict)

    def routed(self, pipeline: str) -> None:
        self.pipelines[pipeline] = self.pipelines.get(pipeline, 0) + 1

    def seam_error(self) -> None:
        self.seam_errors += 1

    def handoff(self, mode: str) -> None:
        self.handoffs[mode] = self.handoffs.get(mode, 0) + 1


@dataclass(frozen=True)
class Open:
    """Open the request's stream ``label`` on ``instance`` (``path``: its endpoint)."""

    label: str
    instance: InstanceConfig
    path: str
    body: dict[str, Any]
    targets: tuple[proto.KvTarget, ...] = ()  # prefill: where its KV goes


@dataclass(frozen=True)
class Drop:
    """Abort the request on ``instance``: not needed on this pipeline."""

    label: str
    instance: InstanceConfig


Action = Open | Drop


@dataclass(frozen=True)
class RequestSpec:
    rid: str
    prompt_len: int
    hashes: list[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    seed: int


def story_for(core: RouterCore, spec: RequestSpec, arrival: float) -> RequestStory:
    """The empty story of a request that reached the router at ``arrival``."""
    dep = core.dep
    ids = (spec.rid, spec.seed, core.model.vocab_size, dep.byte_scale, spec.prompt_len)
    return RequestStory(*ids, router=dep.router.id, arrival=arrival)


class FlowCore:
    """The decisions and bookkeeping of one request on one router."""

    def __init__(
        self,
        core: RouterCore,
        spec: RequestSpec,
        story: RequestStory,
        counters: Counters,
        owner: Hashable | None = None,
    ) -> None:
        self.r = core
        self.owner: Hashable = self if owner is None else owner  # what the router's pools list
        self.spec = spec
        self.story = story
        self.counters = counters
        self.stage = "start"  # what the flow waits for: "D", "MD", "RLD", "open"
        self.labels: dict[str, str] = {}  # instance id -> label
        self.opened: dict[str, InstanceConfig] = {}  # label -> instance
        self.ignored: set[str] = set()
        self.done_labels: set[str] = set()
        self.held: dict[str, str] = {}  # label -> instance id whose load we hold
        self.held_tokens: dict[str, int] = {}  # label -> KV tokens counted on that instance
        self.prefill_pending: tuple[str, float] | None = None  # (P, predicted s) on its backlog
        self.seqr = TokenSequencer()
        self.expected_total: int | None = None
        self.complete = False
        self.wan: list[tuple[LinkEstimator, float]] = []  # (estimator, modelled bytes) in flight
        self._pdd: dict[str, Any] = {}  # PDD's choice between MD's and RLD's reservations

    # -- the sequence ---------------------------------------------------------------------
    def start(self, now: float) -> list[Action]:
        arch = self.r.dep.architecture
        if arch is Architecture.COLOCATED:
            c, _ = self._pick("C", Role.COLOCATED)
            self.r.affinity_insert(c.id, self.spec.hashes)
            self._routed(Pipeline.COLOCATED, {}, now)
            self.stage = "open"
            return [self._open("C", c, GENERATE, self._core())]
        if arch is Architecture.PD:
            d, _ = self._pick("D", Role.DECODE)
            self.stage = "D"
            return [self._open("D", d, DECODE, {**self._core(), "mode": "direct"})]
        md, _ = self._pick("MD", Role.MAIN_DECODE)
        self.stage = "MD"
        return [self._open("MD", md, DECODE, {**self._core(), "mode": "main-auto"})]

    def _advance(self, now: float) -> list[Action]:
        """The reservation the flow waited for has been reported: the next streams."""
        if self.stage == "D":
            self.stage = "open"
            d = self.opened["D"]
            p, _ = self._pick("P", Role.PREFILL)
            self._routed(Pipeline.PD, {}, now)
            target = self._target(p, d, self._cached("D"), "direct")
            return [self._open_prefill(p, [target])]
        if self.stage == "MD":
            return self._after_md(now)
        return self._after_rld(now)

    def _after_md(self, now: float) -> list[Action]:
        r, n = self.r, self.spec.prompt_len
        md = self.opened["MD"]
        md_cached = self._cached("MD")
        p, p_blocks = self._pick("P", Role.PREFILL)
        link = r.link(p, md)
        need = n + self.spec.max_tokens
        prefill_s = r.predict_prefill_s(p, p_blocks, n)
        decision = decide_pipeline(
            PipelineInputs(
                prompt_len=n,
                md_cached_tokens=md_cached,
                kv_bytes_per_token=r.model.kv_bytes_per_token,
                predicted_prefill_s=prefill_s,
                link=link,
                relay_available=r.has_healthy(Role.RELAY_DECODE),
                prefill_queue_s=r.prefill_backlog_s[p.id],
                relay_free_tokens=r.relay_room(),
                relay_need_tokens=need,
            ),
            r.routing_policy,
        )
        self._prefill_on(p.id, prefill_s)
        info = {
            "reason": decision.reason,
            "prefill_queue_s": r.prefill_backlog_s[p.id] - prefill_s,
            "predicted_wan_s": decision.predicted_wan_s,
            "predicted_ttft_s": decision.predicted_ttft_s,
            "md_cached_tokens": md_cached,
            "wan_bandwidth_estimate_bytes_per_s": link.bandwidth,
        }
        if decision.pipeline is Pipeline.DIRECT:
            self.stage = "open"
            self._routed(Pipeline.DIRECT, info, now)
            return [self._open_prefill(p, [self._target(p, md, md_cached, "direct")])]
        rld, _ = self._pick("RLD", Role.RELAY_DECODE, need_tokens=need)
        only = decision.pipeline is Pipeline.RLD_ONLY
        body = {**self._core(), "mode": "direct" if only else "relay"}
        if not only:
            body.update(peer_address=md.address, peer_instance=md.id)
        self.stage = "RLD"
        self._pdd = {"p": p, "info": info, "pipeline": decision.pipeline, "md_cached": md_cached}
        return [self._open("RLD", rld, DECODE, body)]

    def _after_rld(self, now: float) -> list[Action]:
        self.stage = "open"
        p, info, pipeline = self._pdd["p"], self._pdd["info"], self._pdd["pipeline"]
        rld, md = self.opened["RLD"], self.opened["MD"]
        rld_cached = self._cached("RLD")
        info["rld_cached_tokens"] = rld_cached
        self._routed(pipeline, info, now)
        to_rld = self._target(p, rld, rld_cached, "direct")
        if pipeline is Pipeline.RLD_ONLY:
            return [self._drop("MD"), self._open_prefill(p, [to_rld])]
        to_md = self._target(p, md, self._pdd["md_cached"], "main")
        to_md = to_md.model_copy(update={"relay_address": rld.address, "relay_instance": rld.id})
        return [self._open_prefill(p, [to_rld, to_md])]

    # -- building blocks ------------------------------------------------------------------
    def _core(self) -> dict[str, Any]:
        s = self.spec
        return {
            "rid": s.rid,
            "seed": s.seed,
            "prompt_len": s.prompt_len,
            "hashes": s.hashes,
            "max_tokens": s.max_tokens,
            "min_tokens": s.min_tokens,
            "ignore_eos": s.ignore_eos,
        }

    def _cached(self, label: str) -> int:
        return int(self.story.reserved[label]["cached"] or 0)

    def _target(
        self, p: InstanceConfig, dst: InstanceConfig, skip: int, mode: str
    ) -> proto.KvTarget:
        path = "wan" if p.datacenter != dst.datacenter else "intra"
        return proto.KvTarget(
            instance=dst.id, address=dst.address, skip_tokens=skip, path=path, mode=mode
        )

    def _open_prefill(self, p: InstanceConfig, targets: list[proto.KvTarget]) -> Open:
        kvb = self.r.model.kv_bytes_per_token
        n = self.spec.prompt_len
        self.r.affinity_insert(p.id, self.spec.hashes)
        for t in targets:
            self.r.affinity_insert(t.instance, self.spec.hashes)
            if t.path == "wan":
                link = self.r.link(p, self.r.dep.instance(t.instance))
                modelled = float((n - min(t.skip_tokens, n)) * kvb)
                link.started(modelled)
                self.wan.append((link, modelled))
        body = {"rid": self.spec.rid, "seed": self.spec.seed, "prompt_len": n}
        body["hashes"] = self.spec.hashes
        return self._open("P", p, PREFILL, body, tuple(targets))

    def _routed(self, pipeline: Pipeline, info: dict[str, Any], now: float) -> None:
        self.story.pipeline = pipeline.value
        self.story.routed = now
        self.story.routing = info
        self.counters.routed(pipeline.value)

    def _pick(self, label: str, role: Role, need_tokens: int = 0) -> tuple[InstanceConfig, int]:
        """Choose an instance and count this request on it at once (so that concurrent
        requests deciding meanwhile see the load, and a relay's KV room)."""
        inst, blocks = self.r.choose(role, self.spec.hashes, need_tokens)
        self.held[label] = inst.id
        self.r.hold(inst.id, self.owner, need_tokens)
        self.held_tokens[label] = need_tokens
        return inst, blocks

    def _prefill_on(self, p_id: str, seconds: float) -> None:
        """Count this request's predicted prefill on P's backlog until P reports it done."""
        self.prefill_pending = (p_id, seconds)
        self.r.add_backlog(p_id, seconds)

    def _prefill_settled(self) -> None:
        if self.prefill_pending is not None:
            p_id, seconds = self.prefill_pending
            self.prefill_pending = None
            self.r.settle_backlog(p_id, seconds)

    def _open(
        self,
        label: str,
        inst: InstanceConfig,
        path: str,
        body: dict[str, Any],
        targets: tuple[proto.KvTarget, ...] = (),
    ) -> Open:
        self.story.instances[label] = inst.id
        self.labels[inst.id] = label
        self.opened[label] = inst
        if label not in self.held:
            self.held[label] = inst.id
            self.r.hold(inst.id, self.owner)
        return Open(label, inst, path, body, targets)

    def _drop(self, label: str) -> Drop:
        inst = self.opened.pop(label)
        self.ignored.add(label)
        self.labels.pop(inst.id, None)
        self._release(label)
        return Drop(label, inst)

    def _release(self, label: str) -> None:
        inst_id = self.held.pop(label, None)
        if inst_id is not None:
            self.r.unhold(inst_id, self.owner, self.held_tokens.pop(label, 0))

    # -- events ---------------------------------------------------------------------------
    def label_of(self, instance_id: str) -> str | None:
        return self.labels.get(instance_id)

    def pending_labels(self) -> list[str]:
        return [lbl for lbl in self.opened if lbl not in self.done_labels]

    def failed(self, label: str, message: str) -> None:
        """Stream ``label`` broke or an instance is gone (``label`` "router"): raises unless
        the request is complete."""
        if label in self.ignored:
            return
        if not self.complete:
            raise RequestFailed(message)
        self.done_labels.update(self.opened)  # nothing more will come

    def token(self, label: str, position: int, token: int, now: float) -> list[int]:
        """A token from stream ``label``: the tokens now ready for the client, in order."""
        return self.tokens(label, position, [token], now)

    def tokens(self, label: str, first: int, ids: list[int], now: float) -> list[int]:
        """The tokens at positions ``first``, ``first + 1``, ... from stream ``label`` (one
        step's): the tokens now ready for the client, in order."""
        if label in self.ignored:
            return []
        try:
            runs = self.seqr.offer_run(first, ids, ORIGIN.get(label, label))
        except SeamError as exc:
            self._released(exc.ready, now)  # what came before the duplicate still counts
            self.counters.seam_error()
            raise RequestFailed(f"{exc} in request {self.spec.rid}") from None
        self._released(runs, now)
        if len(runs) == 1:
            return runs[0][1]
        return [t for _, run, _ in runs for t in run]

    def _released(self, runs: list[Run], now: float) -> None:
        if runs:
            st = self.story
            if st.first_token is None:
                st.first_token = now
                st.first_token_origin = runs[0][2]
            st.last_token = now
            by = st.tokens_by_origin
            for _, run, o in runs:
                by[o] = by.get(o, 0) + len(run)
        self._check_complete(now)

    def event(self, label: str, ev: dict[str, Any], now: float) -> list[Action]:
        """An event from stream ``label``; returns the streams to open or drop next."""
        if label in self.ignored:
            return []
        kind = ev["ev"]
        if kind == "error":
            inst = self.opened[label].id if label in self.opened else label
            if not self.complete:
                raise RequestFailed(f"{inst}: {ev.get('message')}")
            self.done_labels.add(label)
            return []
        self.story.on_event(label, ev)
        out: list[Action] = []
        if kind == "admitted" and label == self.stage:
            out = self._advance(now)
        elif kind == "done":
            self.done_labels.add(label)
            reason = ev.get("reason")
            if reason in ("length", "stop"):
                self.expected_total = int(ev.get("emitted") or 0)
                self.story.finish_reason = reason
                self.story.finish_origin = ORIGIN.get(label, label)
            self._release(label)
        elif kind == "prefill" and label == "P":
            self._prefill_settled()
        elif kind == "kv_sent" and ev.get("path") == "wan":
            self.wan_done(ev)
        elif kind == "handoff":
            batches = self.story.handoff_batches
            real = [b for b in batches if not b.get("finished")]
            if real:
                self.story.handoff_mode = (
                    "catch-up" if any(not b["final"] for b in real) else real[-1]["mode"]
                )
            if ev.get("final") and not ev.get("finished"):
                self.counters.handoff(self.story.handoff_mode or "?")
        self._check_complete(now)
        return out

    def wan_done(self, ev: dict[str, Any]) -> None:
        """A WAN transfer reported: a sample for the link estimator."""
        if not self.wan:
            return
        link, modelled = self.wan.pop(0)
        start = float(ev["start"])
        link.finished(
            float(ev.get("modelled_bytes", modelled)),
            start=start,
            first_byte=float(ev.get("first_byte", start)),
            last_byte=float(ev["end"]),
            active=ev.get("active"),
        )

    def drain_event(self, label: str, ev: dict[str, Any]) -> None:
        """An event after the client was answered: only links and loads still matter."""
        if label in self.ignored:
            return
        if ev["ev"] == "kv_sent" and ev.get("path") == "wan":
            self.wan_done(ev)
        elif ev["ev"] in ("done", "error"):
            self.done_labels.add(label)
            self._release(label)

    def _check_complete(self, now: float) -> None:
        if (
            not self.complete
            and self.expected_total is not None
            and self.seqr.next_position >= self.expected_total
        ):
            self.complete = True
            self.story.done = now

    def finish_up(self) -> None:
        """The flow is over: whatever it still counts on the router is given back."""
        for link, modelled in self.wan:
            link.abandoned(modelled)
        self.wan.clear()
        self._prefill_settled()
        for label in list(self.held):
            self._release(label)
