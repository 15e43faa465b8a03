"""The nightly matrix's configuration (``pddbench nightly CONFIG``): what a user sets, typed.

Owns the TOML file's model (:class:`NightlyConfig`: scenarios × traces × seeds × repeats
and the replay options as on the command line) and its loading with one-line errors.
Must not run anything (:mod:`pddbench.harness.jobs.nightly` does).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pddbench.errors import UserError


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


class NightlyConfig(_Strict):
    scenarios: list[str] = Field(min_length=1)
    traces: list[TraceSpec] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    repeats: int = Field(3, ge=1, le=20)
    replay: ReplaySettings = ReplaySettings()
    emulate: bool = True


def load_config(path: Path) -> NightlyConfig:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    try:
        return NightlyConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise UserError(f"{path}: {loc}: {str(err['msg']).removeprefix('Value error, ')}") from None
