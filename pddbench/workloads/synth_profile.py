"""The parameters of a synthetic agentic workload: a validated profile loaded from TOML.

A *profile* describes one traffic regime — when agent tasks arrive (daily and weekly
cycle), which agent types exist and how popular they are (Zipf, with per-type trends),
how a task unfolds (turn counts, prompt / output / tool-result sizes, tool time), when
contexts are compacted, and how all of that drifts over the weeks. Built-in profiles ship
as package data (``pddbench/workloads/profiles/<name>.toml``); users may pass a path.

This module owns the profile model and its loading; it draws no random numbers and
builds no traces (see :mod:`pddbench.workloads.synth`).
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pddbench.errors import UserError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LogNormal(_Strict):
    """A log-normal distribution given by its median and log-space sigma, clipped."""

    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=5)
    min: float = Field(default=0.0, ge=0)
    max: float | None = Field(default=None, gt=0, description="no upper bound when absent")

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is above max ({self.max:g})")
        return self


class Arrivals(_Strict):
    """Session (agent task) arrivals: a non-homogeneous Poisson process."""

    sessions_per_s: float = Field(gt=0, description="mean session arrival rate over the period")
    daily_amplitude: float = Field(default=0.5, ge=0, le=1)
    peak_hour_utc: float = Field(default=14.0, ge=0, lt=24)
    weekend_factor: float = Field(default=0.6, gt=0, le=10)


class Service(_Strict):
    """A rough service-time estimate that spaces a session's turns (not a server model).

    ``service_s = overhead_s + uncached_tokens / prefill_tokens_per_s
    + output_tokens / decode_tokens_per_s``; turn n+1 arrives ``service_s`` plus the
    tool time after turn n arrived.
    """

    overhead_s: float = Field(default=0.2, ge=0)
    prefill_tokens_per_s: float = Field(default=10000.0, gt=0)
    decode_tokens_per_s: float = Field(default=40.0, gt=0)


class Session(_Strict):
    """How one agent task unfolds, turn by turn (sizes in tokens, times in seconds)."""

    turns: LogNormal
    task_prompt: LogNormal
    output: LogNormal
    tool_result: LogNormal
    big_tool_prob: float = Field(default=0.0, ge=0, le=1)
    big_tool_result: LogNormal = LogNormal(median=8000, sigma=0.8)
    think_time: LogNormal

    @field_validator("turns")
    @classmethod
    def _turns(cls, v: LogNormal) -> LogNormal:
        if v.min < 1:
            raise ValueError("turns.min must be at least 1")
        return v


class Compaction(_Strict):
    """Context compaction: a summarise request, then the prefix restarts.

    When a turn's context exceeds the session's threshold (or at random, ``random_prob``
    per turn), that turn becomes a summarise request whose output is the summary; the
    next turn's prompt is the agent prompt + the summary + ``restored`` tokens (re-read
    files, recent messages; at most half of the compacted context) — new blocks after
    the shared agent prompt.
    """

    threshold: LogNormal
    random_prob: float = Field(default=0.0, ge=0, le=0.5)
    summary_output: LogNormal
    restored: LogNormal


class AgentType(_Strict):
    """One agent type: its shared system+tools prompt and its departures from the defaults."""

    name: str = Field(min_length=1, max_length=64)
    system_tokens: int = Field(gt=0, le=1_000_000)
    turns_scale: float = Field(default=1.0, gt=0)
    task_scale: float = Field(default=1.0, gt=0)
    output_scale: float = Field(default=1.0, gt=0)
    tool_scale: float = Field(default=1.0, gt=0)
    trend_per_week: float = Field(
        default=0.0, ge=-5, le=5, description="log-growth of its popularity per week"
    )


class Agents(_Strict):
    zipf_exponent: float = Field(default=1.0, ge=0, le=5)
    types: list[AgentType] = Field(min_length=1, max_length=4096)

    @field_validator("types")
    @classmethod
    def _unique(cls, v: list[AgentType]) -> list[AgentType]:
        names = [a.name for a in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate agent type name(s): {', '.join(dup)}")
        return v


class Drift(_Strict):
    """Slow changes over the period: piecewise-linear multipliers at knot days."""

    day: list[float] = Field(default_factory=lambda: [0.0])
    turns_scale: list[float] = Field(default_factory=lambda: [1.0])
    tool_scale: list[float] = Field(default_factory=lambda: [1.0])
    big_tool_prob_scale: list[float] = Field(default_factory=lambda: [1.0])
    compaction_scale: list[float] = Field(default_factory=lambda: [1.0])

    @model_validator(mode="after")
    def _knots(self) -> Self:
        if any(b <= a for a, b in zip(self.day, self.day[1:], strict=False)):
            raise ValueError("drift.day must be strictly increasing")
        for name in ("turns_scale", "tool_scale", "big_tool_prob_scale", "compaction_scale"):
            values: list[float] = getattr(self, name)
            if len(values) != len(self.day):
                raise ValueError(
                    f"drift.{name} has {len(values)} value(s), drift.day has {len(self.day)}"
                )
            if any(v <= 0 for v in values):
                raise ValueError(f"drift.{name} values must be > 0")
        return self


class Profile(_Strict):
    """A complete synthetic-workload profile."""

    name: str = Field(min_length=1)
    description: str = ""
    epoch: str = "2026-01-01T00:00:00Z"
    days: float = Field(gt=0, le=3660)
    block_size: int = Field(default=512, gt=0, le=1_048_576)
    seed: int = Field(default=0, ge=0)
    arrivals: Arrivals
    service: Service = Service()
    session: Session
    compaction: Compaction
    agents: Agents
    drift: Drift = Drift()

    @field_validator("epoch")
    @classmethod
    def _epoch(cls, v: str) -> str:
        try:
            parsed = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an ISO-8601 time: {v!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"epoch needs a time zone (e.g. 'Z'): {v!r}")
        return v

    @model_validator(mode="after")
    def _restart_fits(self) -> Self:
        # a restarted prefix must fit below every threshold, or compaction would never end
        summary_max, restored_max = self.compaction.summary_output.max, self.compaction.restored.max
        if summary_max is None or restored_max is None:
            raise ValueError("compaction.summary_output and compaction.restored need a max")
        worst = max(a.system_tokens for a in self.agents.types) + summary_max + restored_max
        if not worst < self.compaction.threshold.min:
            raise ValueError(
                "compaction.threshold.min must exceed the largest restarted prompt "
                f"(system_tokens + summary_output.max + restored.max = {worst:g})"
            )
        return self

    def epoch_datetime(self) -> datetime:
        """The epoch as an aware UTC datetime."""
        return datetime.fromisoformat(self.epoch.replace("Z", "+00:00")).astimezone(UTC)


def _profiles_folder() -> Traversable:
    return resources.files("pddbench.workloads").joinpath("profiles")


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with pddbench."""
    folder = _profiles_folder()
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def _format_error(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        loc = ".".join(str(part) for part in err["loc"])
        lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def parse_profile(text: str, *, origin: str = "<profile>") -> Profile:
    """A validated profile from TOML text; raises :class:`UserError` naming the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: not valid TOML ({exc})") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        problems = _format_error(exc)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(
            f"{origin}: bad profile: {problems[0]}{more}",
            details=[f"{origin}: {p}" for p in problems],
        ) from None


def load_profile(name_or_path: str | Path) -> Profile:
    """A built-in profile by name (``jan-feb``, ``smoke``) or a profile TOML file by path."""
    text_name = str(name_or_path)
    path = Path(text_name)
    if path.suffix == ".toml" or path.exists() or "/" in text_name:
        if not path.is_file():
            raise UserError(f"{path}: no such profile file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: cannot read profile ({exc})") from None
        return parse_profile(text, origin=str(path))
    names = builtin_profiles()
    if text_name not in names:
        raise UserError(
            f"unknown profile {text_name!r} (built-in: {', '.join(names)}; or give a .toml path)"
        )
    resource = _profiles_folder().joinpath(f"{text_name}.toml")
    return parse_profile(resource.read_text(encoding="utf-8"), origin=f"profile {text_name}")
