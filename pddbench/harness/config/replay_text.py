"""The text form of the replay options: durations, windows, and the way to ReplayOptions.

Owns the parsing of option text (``"90"``, ``"30s"``, ``"10m"``, ``"3d/1h"``) and
:func:`build_options`, the one way from option values as a user writes them — on the
command line (``pddbench replay``, ``capacity``) or in the nightly config's ``[replay]``
table — to a validated :class:`~pddbench.harness.config.replay.ReplayOptions` (one-line
errors). Must not declare command-line options (``cli.options`` does).
"""

from __future__ import annotations

import re

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
