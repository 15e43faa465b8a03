"""ReplayOptions: how to replay, one model from the command line to the run folder and back.

Owns the options' fields and their JSON form (:meth:`ReplayOptions.to_json` /
:meth:`ReplayOptions.from_json`), used alike by the manifest's ``replay`` section, the
Locust job spec a worker receives and ``--resume`` (which reads the manifest and never
re-parses a command line). The command line builds it (``cli.replay.build_options``),
the nightly config through the same builder. Must not parse command-line text itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from pddbench.errors import first_problem
from pddbench.harness.drive.client import ApiConfig
from pddbench.harness.plan.player import OnError, ThinkPolicy
from pddbench.harness.plan.sessions import Selection


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
