"""The replay job (``pddbench replay``): trace → plan → each system run → compare.

Reads and checks the inputs, plans the replay once, runs every system through
:func:`~pddbench.harness.jobs.run_system.run_system` (scenarios in turn, or one
``--target``), resumes an interrupted run in its own folder, prints the comparison and
decides the exit status. A long trace with no selection is the main job
(:mod:`pddbench.harness.jobs.main_job`). Nightly replays through :func:`replay_scenarios`.
Must not deploy or drive anything itself (``run_system`` does).
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import load_trace
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario, load_scenario
from pddbench.harness.drive.backends import AsyncioBackend, Backend, ModelBackend
from pddbench.harness.drive.locust import LocustSettings
from pddbench.harness.drive.replay import ReplayPlan, prepare
from pddbench.harness.engines.requirements import check_runnable
from pddbench.harness.jobs.run_system import (
    Attached,
    NewRun,
    OpenRun,
    RunSettings,
    SystemRun,
    run_system,
)
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.report.summary import print_comparison
from pddbench.harness.rundir.folder import RunPaths, file_digest, started_in
from pddbench.harness.rundir.manifest import RunHead, RunManifest, RunStatus
from pddbench.harness.rundir.records import ErrorClass, read_journal
from pddbench.harness.rundir.sections import ScenarioSection, TraceInfo
from pddbench.workloads.traceio import Trace

EXIT_INTERRUPTED = 130
EXIT_FAILED = 1


def failed_requests(paths: RunPaths) -> tuple[int, dict[str, int]]:
    """(records, requests not ok by error class) of a finalised run folder; those censored
    by the harness's request limit are under ``request_limit``."""
    import pyarrow.parquet as pq

    if not paths.requests.exists():
        return 0, {}
    table = pq.read_table(paths.requests, columns=["status", "error_class"])
    counts: dict[str, int] = {}
    for status, klass in zip(
        table.column("status").to_pylist(), table.column("error_class").to_pylist(), strict=True
    ):
        if status != "ok":
            key = str(klass or status)
            counts[key] = counts.get(key, 0) + 1
    return table.num_rows, counts


def failure_status(runs: list[RunPaths], *, fail_on_errors: bool) -> int:
    """1 when a run has no successful request (or, with ``fail_on_errors``, any failed
    one), with one line per such run on stderr; else 0. Failed requests are data, but a
    run in which nothing succeeded measured nothing it could stand behind."""
    code = 0
    for paths in runs:
        records, by_class = failed_requests(paths)
        not_ok = sum(by_class.values())
        failed = not_ok - by_class.get(ErrorClass.REQUEST_LIMIT.value, 0)  # censored: no error
        if records and (not_ok == records or (fail_on_errors and failed)):
            classes = ", ".join(f"{k} {v}" for k, v in sorted(by_class.items()))
            if not_ok < records:
                what = f"{failed} of {records} requests failed"
            elif failed == records:
                what = "every request failed"
            else:  # nothing measured: every request failed or ran past the request limit
                what = "no request completed"
            click.echo(
                f"pddbench: {paths.run_id}: {what} ({classes}); error rate {failed / records:.1%}",
                err=True,
            )
            code = EXIT_FAILED
    return code


def trace_manifest(trace: Trace, path: Path, plan: ReplayPlan | None) -> TraceInfo:
    """The trace's manifest entry (without a plan: less what each run's plan replayed)."""
    info = TraceInfo(
        path=str(path),
        digest=file_digest(path),
        requests=trace.num_requests,
        epoch=trace.epoch,
        source=trace.source,
    )
    if plan is None:
        return info
    return info.model_copy(
        update={"replayed": plan.selection_note, "replayed_requests": len(plan.requests)}
    )


def replay_main(
    *,
    trace_path: Path,
    scenarios: tuple[str, ...],
    target: str | None,
    label: str | None,
    options: ReplayOptions,
    settings: RunSettings,
    locust: LocustSettings | None = None,
    fail_on_errors: bool = False,
    report: bool = True,
    quick: bool = False,
) -> int:
    """Run the replays; returns the exit status (``locust``: use the Locust engine;
    ``settings.virtual``: the twin in virtual time, reference-server scenarios only).

    A long trace with no selection option is the main job: every system walks the shared
    load ladder and the run ends with the verdict (:mod:`pddbench.harness.jobs.main_job`).

    130 when interrupted; 1 when a scenario could not be deployed, when a run has no
    successful request, or (``fail_on_errors``) when any request failed; else 0."""
    # everything the user gave is checked before anything happens: no emulation probe
    # (a scratch namespace), no run folder, no server before the inputs are known good
    if settings.virtual and (target is not None or locust is not None):
        what = "--target (a live endpoint)" if target is not None else "--engine locust"
        raise UserError(f"--backend virtual replays scenarios in virtual time: not with {what}")
    systems = [] if target is not None else [load_scenario(n) for n in scenarios]
    trace = load_trace(trace_path)
    options, default_note = default_selection(trace.table, options, trace.epoch)
    plan = prepare(trace, options)
    if not plan.requests:
        raise UserError(
            "the selection keeps no request (check --window / --sample / --max-requests)"
        )
    if target is not None and scenarios:
        raise UserError("--target drives an existing endpoint: give no --scenario with it")
    # everything the user gave is checked before a run folder exists or a server starts
    settings.preflight(systems, plan, options)
    if default_note:
        click.echo(f"pddbench: {default_note}", err=True)
    if default_note and target is None and locust is None:
        from pddbench.harness.jobs.main_job import main_verdict

        try:
            return main_verdict(
                systems,
                trace=trace,
                options=options,
                trace_info=trace_manifest(trace, trace_path, None),
                run_settings=settings,
                quick=quick,
            )
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    click.echo(f"pddbench: replaying {plan.selection_note}", err=True)
    trace_info = trace_manifest(trace, trace_path, plan)
    backend = settings.backend(locust)
    if target is not None:
        name = label or "target"
        head = RunHead(
            scenario=ScenarioSection.model_validate(
                {"name": name, "deployment": "external", "target": target, "emulation": None}
            ),
            trace=trace_info,
        )
        done = run_system(
            Attached(target, name),
            plan,
            options,
            run=NewRun(name, head),
            backend=backend,
            settings=settings,
        )
        assert done is not None  # an attached system's failures propagate
        runs = [done.outcome.paths]
        interrupted = done.outcome.interrupted
    else:
        runs, interrupted, failed = replay_scenarios(
            systems,
            plan=plan,
            options=options,
            trace_info=trace_info,
            settings=settings,
            backend=backend,
        )
        if failed and not interrupted:
            print_comparison(runs, html=report)
            failure_status(runs, fail_on_errors=fail_on_errors)
            return EXIT_FAILED
    print_comparison(runs, html=report)
    if interrupted:
        return EXIT_INTERRUPTED
    return failure_status(runs, fail_on_errors=fail_on_errors)


def resume_main(run_dir: Path, *, emulate: bool = True, check_probes: bool = True) -> int:
    """Continue an interrupted run in its own folder (``pddbench replay --resume RUN``).

    The trace and the options are the run's own, read from its manifest (the trace's
    path and the ``replay`` section's :class:`ReplayOptions`); the plan is rebuilt from
    them and only what the journal has not settled is sent
    (:mod:`pddbench.harness.plan.resume`). The servers are deployed afresh, so their
    caches start cold: the manifest's ``resumes`` entry says where that happened."""
    paths = RunPaths(run_dir)
    manifest = RunManifest.load(paths.root)
    if manifest.command[1:2] != ["replay"]:
        raise UserError(f"{run_dir}: the run was not made by `pddbench replay`")
    if manifest.status == RunStatus.COMPLETE:
        raise UserError(f"{run_dir}: the run is complete; nothing to resume")
    if not paths.journal.exists():
        raise UserError(f"{run_dir}: no journal.jsonl; the run never started sending")
    options, trace_path = _recorded_replay(manifest, run_dir)
    trace_path = _resume_trace(trace_path, manifest, run_dir)
    check_probes = check_probes and manifest.probe_check is not False
    trace = load_trace(trace_path)
    recorded = "trace" in manifest.model_fields_set
    if recorded and manifest.trace.digest != file_digest(trace_path):
        raise UserError(f"{trace_path} changed since run {paths.run_id}; cannot resume it")
    options, _ = default_selection(trace.table, options, trace.epoch)
    plan = prepare(trace, options)
    point = ResumePoint.from_rows(read_journal(paths.journal)[0])
    click.echo(
        f"pddbench: resuming {paths.run_id} at t={point.elapsed_s:.1f} s: "
        f"{len(point.settled)} of {len(plan.requests)} requests settled",
        err=True,
    )
    recorded_scenario = manifest.scenario
    if "scenario" not in manifest.model_fields_set:
        raise UserError(f"{run_dir}: the manifest has no scenario")
    system: Scenario | Attached
    if recorded_scenario.external:
        system = Attached(str(recorded_scenario.target), paths.run_id)
    else:
        system = Scenario.model_validate(recorded_scenario.model_dump(exclude_unset=True))
        check_runnable(system.name, system.requires)
    done = run_system(
        system,
        plan,
        options,
        run=OpenRun(paths, manifest),
        backend=AsyncioBackend(),
        settings=RunSettings(
            paths.root.parent,
            manifest.command,
            emulate=emulate and not _recorded_unemulated(manifest),
            check_probes=check_probes,
        ),
        resume=point,
    )
    if done is None:
        return 1
    print_comparison([done.outcome.paths])
    return EXIT_INTERRUPTED if done.outcome.interrupted else 0


def _recorded_replay(manifest: RunManifest, run_dir: Path) -> tuple[ReplayOptions, Path]:
    """The options and the trace a run was made with, from its manifest."""
    replay = manifest.replay
    if replay is not None and replay.engine == "locust":
        raise UserError("--resume continues asyncio-engine runs only (this one used Locust)")
    path = manifest.trace.path
    recorded = dict(replay.model_extra or {}) if replay is not None else {}
    if replay is None or (replay.options is None and "vocab_size" not in recorded) or not path:
        raise UserError(
            f"{run_dir}: its manifest records no replay options (made by an older "
            "pddbench?); cannot resume it"
        )
    if replay.options is None:  # recorded, but not readable by this version: say why
        try:
            ReplayOptions.from_json(recorded)
        except ValueError as exc:
            raise UserError(f"{run_dir}: cannot read the run's options: {exc}") from None
        raise UserError(f"{run_dir}: cannot read the run's options")
    return replay.options, Path(path)


def _resume_trace(recorded: Path, manifest: RunManifest, run_dir: Path) -> Path:
    """The run's trace file: as recorded, or, a relative path not found from here, the same
    path from the folder the run was started in; else one line saying where to put it."""
    if recorded.exists():
        return recorded
    start = None if recorded.is_absolute() else started_in(manifest.command, run_dir)
    if start is not None and (start / recorded).exists():
        return start / recorded
    if recorded.is_absolute():
        where = f"its trace {recorded} is gone"
    elif start is not None:
        where = (
            f"its trace {recorded} (relative to {start}, where the run was started) is not "
            f"there, nor here: put it back at {start / recorded}"
        )
    else:
        where = (
            f"its trace {recorded} is relative to the folder the run was started in, not "
            "found from here: resume from that folder"
        )
    raise UserError(
        f"{run_dir}: {where}; a trace made again (`pddbench trace synth` or `trace import` "
        "with the same arguments) resumes only if its bytes match the digest the run recorded"
    )


def _recorded_unemulated(manifest: RunManifest) -> bool:
    """A run recorded without its WAN resumes without it (older runs: the fallback note)."""
    status = manifest.emulation
    return manifest.emulation_fallback is not None or (status is not None and status.missing)


def replay_scenarios(
    scenarios: list[Scenario],
    *,
    plan: ReplayPlan,
    options: ReplayOptions,
    trace_info: TraceInfo,
    settings: RunSettings,
    backend: Backend | ModelBackend,
) -> tuple[list[RunPaths], bool, int]:
    """Deploy each scenario in turn and replay the same plan, each into its own run
    folder (inputs past :func:`preflight`); (runs, interrupted, failed)."""
    resolved = [settings.fixed(s) for s in scenarios]  # fixed and recorded
    runs: list[RunPaths] = []
    failed = 0
    for scenario in resolved:
        head = RunHead(
            scenario=ScenarioSection.model_validate(scenario.manifest()),
            trace=trace_info,
            probe_check=settings.check_probes,
            emulation=settings.emulation(scenario),
        )
        done: SystemRun | None = run_system(
            scenario,
            plan,
            options,
            run=NewRun(scenario.name, head),
            backend=backend,
            settings=settings,
        )
        if done is None:
            failed += 1
            continue
        runs.append(done.outcome.paths)
        if done.outcome.interrupted:
            return runs, True, failed
    return runs, False, failed
