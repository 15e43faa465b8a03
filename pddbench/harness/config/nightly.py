"""The nightly matrix's configuration (``pddbench nightly CONFIG``): what a user sets, typed.

Owns the TOML file's model (:class:`NightlyConfig`: scenarios × traces × seeds × repeats
whose replay is a :class:`ReplayOptions`, read from the ``[replay]`` table as on the
command line, :class:`ReplaySettings`) and its loading with one-line errors.
Must not run anything (:mod:`pddbench.harness.jobs.nightly` does).
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.replay_text import build_options


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceSpec(_Strict):
    path: str | None = None
    synth: str | None = None  # a synthetic profile name or file
    requests: int | None = Field(None, gt=0)
    sessions: int | None = Field(None, gt=0)
    days: float | None = Field(None, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _one(self) -> TraceSpec:
        if (self.path is None) == (self.synth is None):
            raise ValueError("a trace needs exactly one of path or synth")
        return self

    @property
    def label(self) -> str:
        return Path(self.path).stem if self.path else f"{Path(self.synth or '').stem}-s{self.seed}"


class ReplaySettings(_Strict):
    """The ``[replay]`` table as written: the replay options as on the command line."""

    window: str | None = None
    sample: float = 1.0
    speedup: float = 1.0
    max_requests: int | None = None
    duration: str | None = None
    think_policy: str = "trace"
    on_error: str = "continue"
    max_concurrency: int | None = None
    timeout: str = "15m"
    stall_timeout: str = "120s"

    def options(self) -> ReplayOptions:
        """These settings as :class:`ReplayOptions` (seed 0; each point sets its own)."""
        return build_options(
            seed=0, api="openai", model=None, token_times=False, **self.model_dump()
        )


class NightlyConfig(_Strict):
    scenarios: list[str] = Field(min_length=1)
    traces: list[TraceSpec] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    repeats: int = Field(3, ge=1, le=20)
    replay: ReplayOptions = ReplayOptions()  # from the [replay] table (ReplaySettings)
    emulate: bool = True

    def options(self, seed: int) -> ReplayOptions:
        """The replay options of one seed of the matrix."""
        selection = dataclasses.replace(self.replay.selection, seed=seed)
        return dataclasses.replace(self.replay, selection=selection)


def load_config(path: Path) -> NightlyConfig:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    try:
        replay = ReplaySettings.model_validate(data.pop("replay", {}))
    except ValidationError as exc:
        raise UserError(f"{path}: {_problem(exc, 'replay.')}") from None
    try:
        options = replay.options()
    except UserError as exc:
        raise UserError(f"{path}: replay: {exc}") from None
    try:
        return NightlyConfig.model_validate({**data, "replay": options})
    except ValidationError as exc:
        raise UserError(f"{path}: {_problem(exc)}") from None


def _problem(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    loc = prefix + ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"{loc}: {str(err['msg']).removeprefix('Value error, ')}"
