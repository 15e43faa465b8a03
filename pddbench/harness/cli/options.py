"""The request options every replay-like command shares, and how they become ReplayOptions.

Owns the click declarations of the trace-selection, timing and client options
(:func:`selection_options`) and of path options (:func:`path_option`), the parsing of
their text (durations, windows) and :func:`build_options`, the one way from their values
to a validated :class:`~pddbench.harness.plan.options.ReplayOptions` (``replay``,
``capacity`` and the nightly config all go through it). :data:`OPTION_FIELDS` says which
field of the model each option sets; a test holds the two together. Must not run anything.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import click

from pddbench.errors import UserError
from pddbench.harness.config.replay import (
    ApiConfig,
    ApiKind,
    OnError,
    ReplayOptions,
    Selection,
    ThinkPolicy,
)

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}


def parse_duration(text: str, what: str, *, positive: bool = False) -> float:
    """``"90"``, ``"1.5s"``, ``"10m"``, ``"2h"``, ``"3d"`` → seconds (``positive``: > 0)."""
    m = _DURATION.match(text)
    if not m:
        raise UserError(f"{what}: {text!r} is not a duration (e.g. 90, 30s, 10m, 2h, 3d)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if positive and seconds <= 0:
        raise UserError(f"{what}: {text!r} must be longer than 0 s")
    return seconds


def parse_window(text: str) -> tuple[float, float]:
    """``START/DURATION`` (both durations from the trace's start) → (start_s, duration_s)."""
    if "/" not in text:
        raise UserError(f"--window {text!r}: expected START/DURATION, e.g. 3d/10m")
    start, duration = text.split("/", 1)
    return parse_duration(start, "--window start"), parse_duration(duration, "--window duration")


def build_options(
    *,
    window: str | None,
    sample: float,
    speedup: float,
    max_requests: int | None,
    seed: int,
    think_policy: str,
    on_error: str,
    api: str,
    model: str | None,
    max_concurrency: int | None,
    timeout: str,
    stall_timeout: str,
    token_times: bool,
    duration: str | None = None,
) -> ReplayOptions:
    """Command-line values → validated :class:`ReplayOptions` (one-line errors)."""
    start = window_length = None
    if window:
        start, window_length = parse_window(window)
    try:
        selection = Selection(
            window_start_s=start,
            window_duration_s=window_length,
            sample=sample,
            max_requests=max_requests,
            speedup=speedup,
            seed=seed,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if max_concurrency is not None and max_concurrency <= 0:
        raise UserError("--max-concurrency must be > 0")
    return ReplayOptions(
        selection=selection,
        think_policy=ThinkPolicy(think_policy),
        on_error=OnError(on_error),
        api=ApiConfig(
            kind=ApiKind(api),
            model=model,
            request_timeout_s=parse_duration(timeout, "--timeout", positive=True),
            stall_timeout_s=parse_duration(stall_timeout, "--stall-timeout", positive=True),
            keep_token_times=token_times,
        ),
        max_concurrency=max_concurrency,
        max_duration_s=(
            parse_duration(duration, "--duration", positive=True) if duration is not None else None
        ),
    )


def path_option(*decls: str, help: str, file_okay: bool = True, dir_okay: bool = True, **kw: Any):
    """An option whose value is a :class:`~pathlib.Path` (``None`` when not given, unless
    ``default`` says otherwise); ``file_okay`` / ``dir_okay`` as in :class:`click.Path`."""
    kw.setdefault("default", None)
    kind = click.Path(path_type=Path, file_okay=file_okay, dir_okay=dir_okay)
    return click.option(*decls, type=kind, help=help, **kw)


def _choice(flag: str, default: StrEnum, help: str | None = None):
    """An option whose values are those of ``default``'s enum."""
    return click.option(
        flag,
        type=click.Choice([v.value for v in type(default)]),
        default=default.value,
        show_default=True,
        help=help,
    )


def selection_options(f):
    """The trace-selection and timing options shared by replay-like commands."""
    opts = [
        click.option(
            "--window",
            metavar="START/DURATION",
            help="Replay task groups starting in this window of the trace "
            "(offsets from the trace start, e.g. 3d/10m).",
        ),
        click.option(
            "--sample",
            type=float,
            default=1.0,
            show_default=True,
            help="Fraction of task groups to keep (whole sessions, deterministic).",
        ),
        click.option(
            "--speedup",
            type=float,
            default=1.0,
            show_default=True,
            help="Compress session arrivals by this factor (think times stay real).",
        ),
        click.option(
            "--max-requests",
            type=int,
            default=None,
            help="Keep task groups in start order up to this many requests.",
        ),
        click.option("--seed", type=int, default=0, show_default=True),
        _choice(
            "--think-policy",
            ThinkPolicy.TRACE,
            "Think time between turns: from the trace (falling back to the "
            "arrival gap), the arrival gap, or zero.",
        ),
        _choice(
            "--on-error",
            OnError.CONTINUE,
            "After a failed turn: send the session's next turns anyway, or "
            "skip them (recorded as skipped).",
        ),
        _choice("--api", ApiKind.OPENAI),
        click.option("--model", default=None, help="Model name to send (OpenAI API)."),
        click.option(
            "--max-concurrency",
            type=int,
            default=None,
            help="Cap on in-flight requests (waiting is recorded as client queueing).",
        ),
        click.option("--timeout", default="15m", show_default=True, help="Whole-request limit."),
        click.option(
            "--stall-timeout",
            default="120s",
            show_default=True,
            help="Longest silence within a stream before the request fails.",
        ),
        click.option(
            "--duration",
            default=None,
            help="Send no new request after this long (e.g. 150s); in-flight ones finish. "
            "Sessions are cut there; the manifest counts what was sent.",
        ),
        click.option(
            "--token-times", is_flag=True, help="Keep every token's arrival time in the records."
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


OPTION_FIELDS: dict[str, tuple[str, ...]] = {
    "window": ("selection.window_start_s", "selection.window_duration_s"),
    "sample": ("selection.sample",),
    "speedup": ("selection.speedup",),
    "max_requests": ("selection.max_requests",),
    "seed": ("selection.seed",),
    "think_policy": ("think_policy",),
    "on_error": ("on_error",),
    "api": ("api.kind",),
    "model": ("api.model",),
    "max_concurrency": ("max_concurrency",),
    "timeout": ("api.request_timeout_s",),
    "stall_timeout": ("api.stall_timeout_s",),
    "duration": ("max_duration_s",),
    "token_times": ("api.keep_token_times",),
}
"""Each option of :func:`selection_options` → the ReplayOptions field(s) it sets."""

SCENARIO_FIELDS = (
    "vocab_size",
    "first_token_id",
    "integrity_seed",
    "cache_block_size",
    "api.path",
    "api.ignore_eos",
    "api.send_min_tokens",
    "api.return_token_ids",
    "api.connect_timeout_s",
)
"""The ReplayOptions fields no option sets: the scenario's client (or the default)."""
