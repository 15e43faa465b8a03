"""The server-side story of one request: the ``pdd`` object a client gets with the last chunk.

Owns the shape of that object and how instance events fill it. Times are monotonic seconds
of the host that recorded them (``times.arrival/routed/first_token/last_token/done``: the
router; ``prefill``: P; ``kv_transfers``: the sender; ``kv_landed``: the receiver;
``handoff``: RLD, its ``extend_steps``: MD). ``clocks`` gives each recorder's anchor by
instance id, ``wall = anchor.wall + (t - anchor.mono)``, so a client can join them with its
own clock; processes on one machine (network namespaces included) share one monotonic clock.
Byte counts are real bytes on the wire; ``modelled_*`` are what the modelled deployment
would move (real = modelled × ``byte_scale``). Top-level keys the harness reads directly:
``pipeline``, ``first_token_origin``, ``handoff_mode``, ``relay_tokens``, ``wan_bytes``
(modelled KV + handoff bytes that crossed the WAN). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestStory:
    request_id: str
    seed: int
    vocab_size: int
    byte_scale: float
    prompt_tokens: int
    router: str
    arrival: float
    pipeline: str | None = None
    routed: float | None = None
    routing: dict[str, Any] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # role label -> instance id
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    prefill: dict[str, Any] = field(default_factory=dict)
    reserved: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> {t, cached}
    kv_transfers: list[dict[str, Any]] = field(default_factory=list)
    landed: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> kv_landed event
    handoff_batches: list[dict[str, Any]] = field(default_factory=list)
    extends: list[dict[str, Any]] = field(default_factory=list)
    md_ready: float | None = None
    handoff_mode: str | None = None
    first_token: float | None = None
    first_token_origin: str | None = None
    last_token: float | None = None
    tokens_by_origin: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    finish_origin: str | None = None
    done: float | None = None
    error: str | None = None

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from a prefix cache where the prompt was computed."""
        if "cached" in self.prefill:
            return int(self.prefill["cached"])
        for label in ("C", "D", "MD"):
            if label in self.reserved:
                return int(self.reserved[label].get("cached", 0))
        return 0

    def on_event(self, label: str, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        if kind == "hello":
            self.clocks[ev.get("instance", label)] = ev.get("clock", {})
        elif kind == "admitted":
            if label in ("P", "C"):
                self.prefill.update(queued_until=ev.get("t"), cached=ev.get("cached"))
            else:
                self.reserved[label] = {"t": ev.get("t"), "cached": ev.get("cached")}
        elif kind == "prefill":
            self.prefill.update(
                start=ev.get("start"),
                end=ev.get("end"),
                chunks=ev.get("chunks"),
                cached=ev.get("cached"),
                uncached=ev.get("uncached"),
            )
        elif kind == "kv_sent":
            self.kv_transfers.append({k: v for k, v in ev.items() if k != "ev"})
        elif kind == "kv_landed":
            self.landed[label] = {k: v for k, v in ev.items() if k != "ev"}
        elif kind == "md_ready":
            if self.md_ready is None:
                self.md_ready = ev.get("t")
        elif kind == "handoff":
            self.handoff_batches.append({k: v for k, v in ev.items() if k != "ev"})
        elif kind == "extend":
            self.extends.append({k: v for k, v in ev.items() if k != "ev"})

    def to_json(self) -> dict[str, Any]:
        wan_modelled = sum(
            int(t.get("modelled_bytes", 0)) for t in self.kv_transfers if t.get("path") == "wan"
        )
        wan_real = sum(int(t.get("bytes", 0)) for t in self.kv_transfers if t.get("path") == "wan")
        batches = [b for b in self.handoff_batches if not b.get("finished")]
        handoff: dict[str, Any] | None = None
        if self.handoff_batches:
            wan_modelled += sum(
                int(b.get("modelled_payload_bytes", 0)) for b in self.handoff_batches
            )
            wan_real += sum(int(b.get("payload_bytes", 0)) for b in self.handoff_batches)
            final = batches[-1] if batches and batches[-1].get("final") else None
            handoff = {
                "mode": self.handoff_mode,
                "batches": len(batches),
                "tokens": sum(int(b["end"]) - int(b["start"]) for b in batches),
                "seam": None if final is None else final.get("end"),
                "finished_on_relay": self.finish_origin == "RLD",
                "md_ready": self.md_ready,
                "start": self.handoff_batches[0].get("t_send"),
                "end": None if final is None else final.get("t_ack"),
                "payload_bytes": sum(int(b.get("payload_bytes", 0)) for b in self.handoff_batches),
                "modelled_payload_bytes": sum(
                    int(b.get("modelled_payload_bytes", 0)) for b in self.handoff_batches
                ),
                "batch_list": self.handoff_batches,
                "extend_steps": self.extends,
            }
        relay_tokens = self.tokens_by_origin.get("RLD", 0)
        return {
            "request_id": self.request_id,
            "pipeline": self.pipeline,
            "first_token_origin": self.first_token_origin,
            "handoff_mode": self.handoff_mode,
            "relay_tokens": relay_tokens,
            "wan_bytes": wan_modelled,
            "wan_bytes_real": wan_real,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": sum(self.tokens_by_origin.values()),
            "tokens_by_origin": self.tokens_by_origin,
            "finish_reason": self.finish_reason,
            "finish_origin": self.finish_origin,
            "instances": self.instances,
            "routing": self.routing,
            "times": {
                "arrival": self.arrival,
                "routed": self.routed,
                "prefill_queued_until": self.prefill.get("queued_until"),
                "prefill_start": self.prefill.get("start"),
                "prefill_end": self.prefill.get("end"),
                "first_token": self.first_token,
                "last_token": self.last_token,
                "done": self.done,
            },
            "prefill": self.prefill,
            "decode_side": self.reserved,
            "kv_transfers": self.kv_transfers,
            "kv_landed": self.landed,
            "handoff": handoff,
            "byte_scale": self.byte_scale,
            "token_fn": {"seed": self.seed, "vocab_size": self.vocab_size},
            "clocks": self.clocks,
            "error": self.error,
        }
