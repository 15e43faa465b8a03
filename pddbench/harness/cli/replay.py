"""``pddbench replay``: the main job — replay a trace against one or more systems and compare.

Parses options into :class:`ReplayOptions`, loads the trace (a missing file gets a
one-line hint on how to make one), then either drives an existing endpoint
(``--target URL``: no deployment, no emulation, and the manifest says so) or deploys
each scenario in turn and replays the same plan against it. Ends with a comparison table
and the run folders; exits 130 when interrupted, 1 when a scenario could not be deployed
or a run has no successful request (with ``--fail-on-errors``: any failed request).
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.cli.options import (
    backend_option,
    path_option,
    run_settings,
    selection_options,
)
from pddbench.harness.config.replay_text import build_options
from pddbench.harness.rundir.folder import DEFAULT_OUT

DEFAULT_SCENARIOS = ("same-dc-pd", "cross-dc-pd", "pdd")


def check_target(url: str) -> str:
    """A ``--target`` base URL the client can use (http(s), a host, a valid port)."""
    from pddbench.harness.drive.framing import Target

    try:
        Target.parse(url)
    except ValueError as exc:
        raise UserError(f"--target {url!r}: {exc} (e.g. http://127.0.0.1:8000)") from None
    return url


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
@path_option(
    "--trace",
    "trace_path",
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
@path_option(
    "--out",
    "out_root",
    default=Path(DEFAULT_OUT),
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
    "--no-report",
    is_flag=True,
    help="Print the headline table but write no HTML report (`pddbench report RUN` "
    "writes it later).",
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
@path_option(
    "--resume",
    "resume_dir",
    file_okay=False,
    metavar="RUN",
    help="Continue an interrupted run folder with its own trace and options: settled "
    "requests are kept, the rest are sent (asyncio engine).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Main job only (a long trace, no selection): smaller points (150 requests, "
    "20-60 s), one bisection point, a 15-minute plan; fewer requests, wider intervals, "
    "and the report says so.",
)
@backend_option
@locust_options
@selection_options
def replay(
    trace_path: Path | None,
    scenarios: tuple[str, ...],
    target: str | None,
    out_root: Path,
    label: str | None,
    no_emulation: bool,
    no_report: bool,
    fail_on_errors: bool,
    no_probe_check: bool,
    resume_dir: Path | None,
    quick: bool,
    backend: str,
    link_model: Path | None,
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
        if trace_path is not None or scenarios or target or backend != "emulated" or link_model:
            raise UserError("--resume RUN takes the run's own trace, scenario, backend and options")
        raise click.exceptions.Exit(_resume(resume_dir, no_emulation, no_probe_check))
    if trace_path is None:
        raise UserError("--trace is required (only a --worker runs without one)")
    if engine != "locust" and (locust_master or web_ui or master_host):
        raise UserError("--master, --master-host and --web-ui need --engine locust")
    if workers < 1:
        raise UserError("--workers must be >= 1")
    from pddbench.harness.drive.locust import LocustSettings
    from pddbench.harness.jobs.replay import replay_main

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
        label=label,
        options=options,
        settings=run_settings(
            out_root,
            no_emulation=no_emulation,
            backend=backend,
            no_probe_check=no_probe_check,
            link_model=link_model,
        ),
        locust=locust,
        fail_on_errors=fail_on_errors,
        report=not no_report,
        quick=quick,
    )
    if code:
        raise click.exceptions.Exit(code)


def _resume(run_dir: Path, no_emulation: bool, no_probe_check: bool) -> int:
    """Continue the run with the trace and options its manifest records."""
    from pddbench.harness.jobs.replay import resume_main

    return resume_main(run_dir, emulate=not no_emulation, check_probes=not no_probe_check)
