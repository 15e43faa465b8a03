"""Internal wire protocol between the router and the instances (and between instances).

Owns the message shapes and their encoding; no sockets.

Endpoints on every worker instance (router → instance unless noted)::

    GET  /internal/events?router=ID   the event channel (see pddbench.servers.channel)
    POST /internal/generate    GenerateSpec  -> 200 {"accepted": rid}   (colocated)
    POST /internal/prefill     PrefillSpec   -> 200                      (prefill)
    POST /internal/decode      DecodeSpec    -> 200                      (decoders)
    POST /internal/kv/{rid}    raw KV bytes, KV_* headers      (prefill -> decoder)
    POST /internal/md_ready    MdReady                         (MD -> RLD)
    POST /internal/handoff     one JSON line (HandoffMsg) + KV bytes for a KV handoff (RLD -> MD)
    POST /internal/abort       Abort

A request's events (:data:`EVENTS`, tokens) travel on the router's event channel, tagged
with the request id; ``spec.channel`` names the router whose channel carries them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

NDJSON = "application/x-ndjson"

# KV transfer headers (prefill -> decoder)
KV_FROM = "X-KV-From"
KV_BYTES = "X-KV-Bytes"  # real bytes in the body
KV_MODELLED = "X-KV-Modelled-Bytes"
KV_TOKENS = "X-KV-Tokens"
KV_PATH = "X-KV-Path"  # "intra" | "wan"
KV_MODE = "X-KV-Mode"  # "direct" | "main"
KV_RELAY = "X-KV-Relay"  # RLD address for an MD in main mode
KV_RELAY_ID = "X-KV-Relay-Id"

EVENTS = (
    "hello",  # instance, role, clock anchor
    "admitted",  # t, cached: KV reserved (decoders: the matched prefix MD/D/RLD reports)
    "prefill",  # start, end, chunks, cached, uncached
    "kv_sent",  # to, path, start, end, bytes, modelled_bytes, tokens
    "kv_landed",  # from, path, start, end, bytes, modelled_bytes
    "md_ready",  # level, t (MD: told RLD; RLD: heard)
    "handoff",  # start, end, final, mode, t_send, t_ack, payload_bytes, modelled_payload_bytes
    "extend",  # k, start, end, final (MD)
    "done",  # reason, t, emitted
    "error",  # kind, message
)


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestCore(_Msg):
    rid: str
    channel: str
    seed: int
    prompt_len: int = Field(ge=1)
    hashes: list[int]
    max_tokens: int = Field(ge=1)
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = True


class GenerateSpec(RequestCore):
    pass


class KvTarget(_Msg):
    instance: str
    address: str
    skip_tokens: int = Field(ge=0)  # prefix the receiver already has
    path: str  # "intra" | "wan"
    mode: str = "direct"  # "direct" | "main"
    relay_address: str | None = None
    relay_instance: str | None = None


class PrefillSpec(_Msg):
    rid: str
    channel: str
    seed: int
    prompt_len: int = Field(ge=1)
    hashes: list[int]
    targets: list[KvTarget]


class DecodeSpec(RequestCore):
    mode: str = Field("direct", pattern="^(direct|relay|main-auto)$")
    peer_address: str | None = None  # relay: MD's address
    peer_instance: str | None = None


class MdReady(_Msg):
    rid: str
    level: int = Field(ge=0)
    md_instance: str


class HandoffMsg(_Msg):
    rid: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    final: bool
    mode: str
    finished: bool = False
    token_ids: list[int]
    kv_bytes: int = 0  # real KV bytes that follow the JSON line (KV handoff)
    kv_modelled_bytes: int = 0
    rld_instance: str
    rld_address: str
    t_send: float


class Abort(_Msg):
    rid: str
    reason: str = "aborted by router"
