"""``pddbench replay``: the main job — replay a trace against one or more systems and compare.

Parses options into :class:`ReplayOptions`, loads the trace (a missing file gets a
one-line hint on how to make one), then either drives an existing endpoint
(``--target URL``: no deployment, no emulation, and the manifest says so) or deploys
each scenario in turn and replays the same plan against it. Ends with a comparison table
and the run folders; exits 130 when interrupted, 1 when a scenario could not be deployed
or a run has no successful request (with ``--fail-on-errors``: any failed request).
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.drive.client import ApiConfig, ApiKind
from pddbench.harness.drive.replay import ReplayOptions
from pddbench.harness.plan.player import OnError, ThinkPolicy
from pddbench.harness.plan.sessions import Selection

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}

DEFAULT_SCENARIOS = ("same-dc-pd", "cross-dc-pd", "pdd")


def parse_duration(text: str, what: str, *, positive: bool = False) -> float:
    """``"90"``, ``"1.5s"``, ``"10m"``, ``"2h"``, ``"3d"`` → seconds (``positive``: > 0)."""
    m = _DURATION.match(text)
    if not m:
        raise UserError(f"{what}: {text!r} is not a duration (e.g. 90, 30s, 10m, 2h, 3d)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if positive and seconds <= 0:
        raise UserError(f"{what}: {text!r} must be longer than 0 s")
    return seconds


def check_target(url: str) -> str:
    """A ``--target`` base URL the client can use (http(s), a host, a valid port)."""
    from pddbench.harness.drive.framing import Target

    try:
        Target.parse(url)
    except ValueError as exc:
        raise UserError(f"--target {url!r}: {exc} (e.g. http://127.0.0.1:8000)") from None
    return url


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
        click.option(
            "--think-policy",
            type=click.Choice([p.value for p in ThinkPolicy]),
            default=ThinkPolicy.TRACE.value,
            show_default=True,
            help="Think time between turns: from the trace (falling back to the "
            "arrival gap), the arrival gap, or zero.",
        ),
        click.option(
            "--on-error",
            type=click.Choice([p.value for p in OnError]),
            default=OnError.CONTINUE.value,
            show_default=True,
            help="After a failed turn: send the session's next turns anyway, or "
            "skip them (recorded as skipped).",
        ),
        click.option(
            "--api",
            type=click.Choice([k.value for k in ApiKind]),
            default=ApiKind.OPENAI.value,
            show_default=True,
        ),
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


def locust_options(f):
    """``--engine`` and the Locust engine's options (distributed load generation)."""
    opts = [
        click.option(
            "--engine",
            type=click.Choice(["asyncio", "locust"]),
            default="asyncio",
            show_default=True,
            help="asyncio: one client process; locust: a Locust master and --workers worker "
            "processes (or machines, with --master).",
        ),
        click.option(
            "--workers",
            type=int,
            default=2,
            show_default=True,
            help="Locust workers: started here, or expected from other machines (--master).",
        ),
        click.option(
            "--master",
            "locust_master",
            is_flag=True,
            help="Locust: be the master of workers on other machines (start each with "
            "`pddbench replay --engine locust --worker --master-host THIS_HOST`).",
        ),
        click.option(
            "--worker",
            "locust_worker",
            is_flag=True,
            help="Locust: be a worker of the master at --master-host (needs no trace: the "
            "master sends the shard, target and options).",
        ),
        click.option("--master-host", default=None, metavar="HOST", help="Locust master."),
        click.option(
            "--master-port", type=int, default=5557, show_default=True, help="Locust master's port."
        ),
        click.option("--web-ui", is_flag=True, help="Locust: serve Locust's web UI (live view)."),
        click.option("--web-port", type=int, default=8089, show_default=True),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command("replay")
@click.option(
    "--trace",
    "trace_path",
    default=None,
    type=click.Path(path_type=Path),
    help="Canonical trace (parquet) to replay (required, except with --worker).",
)
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    metavar="NAME|FILE",
    help="Scenario(s) to deploy and compare; default: same-dc-pd, cross-dc-pd, pdd.",
)
@click.option(
    "--target",
    default=None,
    metavar="URL",
    help="Drive an existing endpoint instead of deploying (no emulation).",
)
@click.option(
    "--out",
    "out_root",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Folder that receives one sub-folder per run.",
)
@click.option("--label", default=None, help="Run label (default: scenario name or 'target').")
@click.option(
    "--no-emulation",
    is_flag=True,
    help="Run the scenarios' servers on loopback without the emulated network "
    "(no root needed; transfer times are then not the WAN's, and every report of the "
    "runs says WAN NOT EMULATED). Without it, replay refuses where it cannot emulate.",
)
@click.option(
    "--fail-on-errors",
    is_flag=True,
    help="Exit 1 when any request failed (default: only when a run has no successful "
    "request; failed requests are recorded either way).",
)
@click.option(
    "--no-probe-check",
    is_flag=True,
    help="Record link probes but do not refuse to run when they are off.",
)
@click.option(
    "--resume",
    "resume_dir",
    default=None,
    type=click.Path(path_type=Path, file_okay=False),
    metavar="RUN",
    help="Continue an interrupted run folder with its own trace and options: settled "
    "requests are kept, the rest are sent (asyncio engine).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Main job only (a long trace, no selection): a shorter load ladder (4 points of "
    "35 s); fewer requests, wider intervals, and the report says so.",
)
@locust_options
@selection_options
def replay(
    trace_path: Path | None,
    scenarios: tuple[str, ...],
    target: str | None,
    out_root: Path,
    label: str | None,
    no_emulation: bool,
    fail_on_errors: bool,
    no_probe_check: bool,
    resume_dir: Path | None,
    quick: bool,
    engine: str,
    workers: int,
    locust_master: bool,
    locust_worker: bool,
    master_host: str | None,
    master_port: int,
    web_ui: bool,
    web_port: int,
    **kw: object,
) -> None:
    """Replay agentic sessions from TRACE against the systems under test."""
    if locust_worker:
        if not master_host:
            raise UserError("--worker needs --master-host HOST (the master's address)")
        from pddbench.harness.drive.locust import run_locust_worker

        raise click.exceptions.Exit(run_locust_worker(master_host, master_port))
    if resume_dir is not None:
        if trace_path is not None or scenarios or target:
            raise UserError("--resume RUN takes the run's own trace, scenario and options")
        raise click.exceptions.Exit(_resume(resume_dir, no_emulation, no_probe_check))
    if trace_path is None:
        raise UserError("--trace is required (only a --worker runs without one)")
    if engine != "locust" and (locust_master or web_ui or master_host):
        raise UserError("--master, --master-host and --web-ui need --engine locust")
    if workers < 1:
        raise UserError("--workers must be >= 1")
    from pddbench.harness.drive.locust import LocustSettings
    from pddbench.harness.pipeline import replay_main

    locust = None
    if engine == "locust":
        locust = LocustSettings(
            workers=workers,
            master=locust_master,
            master_port=master_port,
            web_ui=web_ui,
            web_port=web_port,
        )

    options = build_options(**kw)  # type: ignore[arg-type]
    if target is not None:
        check_target(target)
    code = replay_main(
        trace_path=trace_path,
        scenarios=scenarios or (() if target else DEFAULT_SCENARIOS),
        target=target,
        out_root=out_root,
        label=label,
        options=options,
        argv=["pddbench", *sys.argv[1:]],
        emulate=not no_emulation,
        check_probes=not no_probe_check,
        locust=locust,
        fail_on_errors=fail_on_errors,
        quick=quick,
    )
    if code:
        raise click.exceptions.Exit(code)


def _resume(run_dir: Path, no_emulation: bool, no_probe_check: bool) -> int:
    """Re-read the run's command line from its manifest and continue the run."""
    from pddbench.harness.pipeline import resume_main
    from pddbench.harness.rundir.folder import RunPaths, read_manifest

    paths = RunPaths(run_dir)
    try:
        command = read_manifest(paths).get("command")
    except (OSError, ValueError) as exc:
        raise UserError(f"{run_dir}: not a run folder ({paths.manifest}: {exc})") from None
    if not isinstance(command, list) or command[1:2] != ["replay"]:
        raise UserError(f"{run_dir}: the run was not made by `pddbench replay`")
    try:
        params = replay.make_context("replay", [str(a) for a in command[2:]]).params
    except click.ClickException as exc:
        msg = exc.format_message()
        raise UserError(f"{run_dir}: cannot re-read its command line: {msg}") from None
    if params.get("engine") == "locust":
        raise UserError("--resume continues asyncio-engine runs only (this one used Locust)")
    wanted = inspect.signature(build_options).parameters  # the request options, not the rest
    options = build_options(**{k: v for k, v in params.items() if k in wanted})
    return resume_main(
        run_dir,
        trace_path=Path(params["trace_path"]),
        options=options,
        emulate=not (no_emulation or params.get("no_emulation")),
        check_probes=not (no_probe_check or params.get("no_probe_check")),
    )
