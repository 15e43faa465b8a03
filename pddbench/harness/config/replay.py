"""ReplayOptions: how to replay, one model from the command line to the run folder and back.

Owns the options and their parts — :class:`Selection` (which sessions, how fast),
:class:`ThinkPolicy`, :class:`OnError`, :class:`ApiConfig` (how to talk to the server) —
and their JSON form (:meth:`ReplayOptions.to_json` /
:meth:`ReplayOptions.from_json`), used alike by the manifest's ``replay`` section, the
Locust job spec a worker receives and ``--resume`` (which reads the manifest and never
re-parses a command line). The command line builds it (``cli.replay.build_options``),
the nightly config through the same builder. Must not parse command-line text itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter, ValidationError

from pddbench.errors import first_problem


class ThinkPolicy(StrEnum):
    """Where a turn's think (tool) time comes from when the trace has none."""

    TRACE = "trace"  # think_time_s from the trace; missing values fall back to ARRIVAL_GAP
    ARRIVAL_GAP = "arrival-gap"  # child arrival − parent arrival (includes the old service time)
    ZERO = "zero"  # send the next turn as soon as the previous one completes


class OnError(StrEnum):
    """What happens to a session's later turns when a turn fails."""

    CONTINUE = "continue"  # send them anyway (an agent would retry and carry on)
    ABORT_SESSION = "abort-session"  # skip every request that depends on the failed one


@dataclass(frozen=True)
class Selection:
    """Which part of a trace to replay, and how fast its sessions arrive."""

    window_start_s: float | None = None
    window_duration_s: float | None = None
    sample: float = 1.0
    max_requests: int | None = None
    speedup: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.sample <= 1.0:  # NaN fails this too
            raise ValueError("--sample must be in (0, 1]")
        if not (math.isfinite(self.speedup) and self.speedup > 0):
            raise ValueError(f"--speedup must be a finite number > 0, got {self.speedup:g}")
        if self.max_requests is not None and self.max_requests <= 0:
            raise ValueError("--max-requests must be > 0")
        if self.window_duration_s is not None and self.window_duration_s <= 0:
            raise ValueError("--window duration must be > 0")


class ApiKind(StrEnum):
    OPENAI = "openai"
    SGLANG = "sglang"


@dataclass(frozen=True)
class ApiConfig:
    """How to talk to the server under test."""

    kind: ApiKind = ApiKind.OPENAI
    path: str | None = None  # default: /v1/completions (openai) or /generate (sglang)
    model: str | None = None
    ignore_eos: bool = True
    send_min_tokens: bool = True
    return_token_ids: bool = True
    request_timeout_s: float = 900.0
    stall_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    keep_token_times: bool = False

    @property
    def endpoint(self) -> str:
        if self.path:
            return self.path
        return "/generate" if self.kind is ApiKind.SGLANG else "/v1/completions"


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay (independent of which system is under test)."""

    selection: Selection = field(default_factory=Selection)
    think_policy: ThinkPolicy = ThinkPolicy.TRACE
    on_error: OnError = OnError.CONTINUE
    api: ApiConfig = field(default_factory=ApiConfig)
    max_concurrency: int | None = None
    vocab_size: int = 32000
    first_token_id: int = 1000
    integrity_seed: int | None = None  # reference servers' output seed: check every token
    cache_block_size: int | None = None  # engine's block size for theoretical cached tokens
    max_duration_s: float | None = None  # no new request after this (in-flight ones finish)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe values (enums as their string values)."""
        return _ADAPTER.dump_python(self, mode="json")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplayOptions:
        """The inverse of :meth:`to_json` (keys it does not know are ignored);
        ``ValueError`` naming the first bad field."""
        try:
            return _ADAPTER.validate_python(data)
        except ValidationError as exc:
            loc, msg = first_problem(exc)
            raise ValueError(f"replay options: {loc}: {msg}") from None


_ADAPTER: TypeAdapter[ReplayOptions] = TypeAdapter(ReplayOptions)
