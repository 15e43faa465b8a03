"""The request options every replay-like command shares, and how they become ReplayOptions.

Owns the click declarations of the trace-selection, timing and client options
(:func:`selection_options`), of path options (:func:`path_option`) and of ``--backend``
(:func:`backend_option`); their values become
a :class:`~pddbench.harness.config.replay.ReplayOptions` through
:func:`~pddbench.harness.config.replay_text.build_options` (``replay``, ``capacity`` and
the nightly config all go through it). :data:`OPTION_FIELDS` says which field of the model
each option sets; a test holds the two together. Must not run anything.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pddbench.errors import UserError
from pddbench.harness.config.replay import (
    ApiKind,
    OnError,
    ThinkPolicy,
)

if TYPE_CHECKING:
    from pddbench.harness.jobs.run_system import RunSettings


def path_option(*decls: str, help: str, file_okay: bool = True, dir_okay: bool = True, **kw: Any):
    """An option whose value is a :class:`~pathlib.Path` (``None`` when not given, unless
    ``default`` says otherwise); ``file_okay`` / ``dir_okay`` as in :class:`click.Path`."""
    kw.setdefault("default", None)
    kind = click.Path(path_type=Path, file_okay=file_okay, dir_okay=dir_okay)
    return click.option(*decls, type=kind, help=help, **kw)


def backend_option(f):
    """``--backend emulated|virtual``: the deployed servers, or the virtual-time twin; and
    ``--link-model FILE``: the twin's calibrated link model."""
    f = path_option(
        "--link-model",
        help="With --backend virtual: the twin's link parameters from `pddbench twin "
        "calibrate` (recorded in the manifest); default: the scenario's configured [network].",
        dir_okay=False,
    )(f)
    return click.option(
        "--backend",
        type=click.Choice(["emulated", "virtual"]),
        default="emulated",
        show_default=True,
        help="emulated: deploy the scenario's servers (the emulated WAN); virtual: replay a "
        "reference-server scenario through the virtual-time twin (no deployment, no root, "
        "deterministic; every report says VIRTUAL TIME).",
    )(f)


def run_settings(
    out_root: Path,
    *,
    no_emulation: bool,
    backend: str,
    no_probe_check: bool = False,
    link_model: Path | None = None,
) -> RunSettings:
    """The job's :class:`~pddbench.harness.jobs.run_system.RunSettings` from the shared
    flags (``--out``, ``--no-emulation``, ``--backend``, ``--no-probe-check``,
    ``--link-model``: loaded and checked here, before any run), recording this command
    line."""
    from pddbench.harness.jobs.run_system import RunSettings

    source = None
    if link_model is not None:
        if backend != "virtual":
            raise UserError("--link-model is the twin's: it needs --backend virtual")
        from pddbench.twin.calibrate import load_link_model

        source = load_link_model(link_model)
    return RunSettings(
        out_root,
        ["pddbench", *sys.argv[1:]],
        emulate=not no_emulation,
        check_probes=not no_probe_check,
        virtual=backend == "virtual",
        link_model=source,
    )


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
