"""The body of ``pddbench replay``: trace → plan → (deploy →) replay → finalise → compare.

Kept apart from the click declarations so it can be called from tests and from other
commands (capacity search, nightly) with the same semantics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import check_out_folder, load_trace
from pddbench.harness.config.scenario import Scenario, load_scenario
from pddbench.harness.deploy.emulation import EmulationStatus
from pddbench.harness.deploy.systems import deploy, emulation_problem, run_in_client_netns
from pddbench.harness.drive.client import ApiKind
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.locust import LocustSettings
from pddbench.harness.drive.replay import (
    ReplayOptions,
    ReplayOutcome,
    ReplayPlan,
    check_prompts,
    prepare,
    prepare_theoretical,
    run_replay,
)
from pddbench.harness.drive.scrape import metrics_targets
from pddbench.harness.engines.requirements import check_runnable
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.report.summary import print_comparison
from pddbench.harness.rundir.folder import (
    RunPaths,
    check_out_root,
    file_digest,
    new_run,
    started_in,
)
from pddbench.harness.rundir.manifest import RunManifest, RunStatus
from pddbench.harness.rundir.records import ErrorClass, read_journal
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
                f"pddbench: {paths.run_id}: {what} ({classes}); "
                f"error rate {failed / records:.1%}",
                err=True,
            )
            code = EXIT_FAILED
    return code


def trace_manifest(trace: Trace, path: Path, plan: ReplayPlan | None) -> dict[str, object]:
    """The trace's manifest entry (without a plan: less what each run's plan replayed)."""
    info: dict[str, object] = {
        "path": str(path),
        "digest": file_digest(path),
        "requests": trace.num_requests,
        "epoch": trace.epoch,
        "source": trace.source,
    }
    if plan is not None:
        info.update(replayed=plan.selection_note, replayed_requests=len(plan.requests))
    return info


def replay_main(
    *,
    trace_path: Path,
    scenarios: tuple[str, ...],
    target: str | None,
    out_root: Path,
    label: str | None,
    options: ReplayOptions,
    argv: list[str],
    emulate: bool = True,
    check_probes: bool = True,
    locust: LocustSettings | None = None,
    fail_on_errors: bool = False,
    report: bool = True,
    quick: bool = False,
) -> int:
    """Run the replays; returns the exit status (``locust``: use the Locust engine).

    A long trace with no selection option is the main job: every system walks the shared
    load ladder and the run ends with the verdict (:mod:`pddbench.harness.main_job`).

    130 when interrupted; 1 when a scenario could not be deployed, when a run has no
    successful request, or (``fail_on_errors``) when any request failed; else 0."""
    # everything the user gave is checked before anything happens: no emulation probe
    # (a scratch namespace), no run folder, no server before the inputs are known good
    trace = load_trace(trace_path)
    options, default_note = default_selection(trace.table, options, trace.epoch)
    plan = prepare(trace, options)
    if not plan.requests:
        raise UserError(
            "the selection keeps no request (check --window / --sample / --max-requests)"
        )
    check_out_folder(out_root)
    if target is not None:
        if scenarios:
            raise UserError("--target drives an existing endpoint: give no --scenario with it")
        check_prompts(plan, options)
    else:
        require_emulation(ready_scenarios(scenarios, plan, options), emulate)
    check_out_root(out_root)
    if default_note:
        click.echo(f"pddbench: {default_note}", err=True)
    if default_note and target is None and locust is None:
        from pddbench.harness.main_job import main_verdict

        try:
            return main_verdict(
                scenarios,
                trace=trace,
                options=options,
                out_root=out_root,
                argv=argv,
                trace_info=trace_manifest(trace, trace_path, None),
                emulate=emulate,
                check_probes=check_probes,
                quick=quick,
            )
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
    click.echo(f"pddbench: replaying {plan.selection_note}", err=True)
    trace_info = trace_manifest(trace, trace_path, plan)
    runs: list[RunPaths] = []
    interrupted = False
    if target is not None:
        paths = new_run(out_root, label or "target")
        manifest = RunManifest.begin(argv=argv, run_id=paths.run_id)
        manifest.scenario = {
            "name": label or "target",
            "deployment": "external",
            "target": target,
            "emulation": None,
        }
        manifest.trace = trace_info
        if locust is not None:
            outcome = locust.run(plan, options, target, paths, manifest, label=label or "target")
        else:
            outcome = run_replay(
                plan, options, target, paths, manifest, live=LiveView(label or "target")
            )
        runs.append(outcome.paths)
        interrupted = outcome.interrupted
    else:
        runs, interrupted, failed = replay_scenarios(
            scenarios,
            plan=plan,
            options=options,
            out_root=out_root,
            argv=argv,
            trace_info=trace_info,
            emulate=emulate,
            check_probes=check_probes,
            locust=locust,
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
    if recorded and manifest.trace.get("digest") != file_digest(trace_path):
        raise UserError(f"{trace_path} changed since run {paths.run_id}; cannot resume it")
    options, _ = default_selection(trace.table, options, trace.epoch)
    plan = prepare(trace, options)
    point = ResumePoint.from_rows(read_journal(paths.journal)[0])
    click.echo(
        f"pddbench: resuming {paths.run_id} at t={point.elapsed_s:.1f} s: "
        f"{len(point.settled)} of {len(plan.requests)} requests settled",
        err=True,
    )
    scenario_data = manifest.scenario
    if not scenario_data:
        raise UserError(f"{run_dir}: the manifest has no scenario")
    if scenario_data.get("deployment") == "external":
        target = str(scenario_data["target"])
        outcome: ReplayOutcome | None = run_replay(
            plan, options, target, paths, manifest, live=LiveView(paths.run_id), resume=point
        )
    else:
        scenario = Scenario.model_validate(scenario_data)
        check_runnable(scenario.name, scenario.requires)
        outcome = replay_one(
            scenario,
            paths,
            manifest,
            plan=plan,
            options=options,
            emulate=emulate and not _recorded_unemulated(manifest),
            check_probes=check_probes,
            resume=point,
        )
    if outcome is None:
        return 1
    print_comparison([outcome.paths])
    return EXIT_INTERRUPTED if outcome.interrupted else 0


def _recorded_replay(manifest: RunManifest, run_dir: Path) -> tuple[ReplayOptions, Path]:
    """The options and the trace a run was made with, from its manifest."""
    replay = manifest.replay or {}
    if replay.get("engine") == "locust":
        raise UserError("--resume continues asyncio-engine runs only (this one used Locust)")
    path = manifest.trace.get("path")
    if "vocab_size" not in replay or not path:
        raise UserError(
            f"{run_dir}: its manifest records no replay options (made by an older "
            "pddbench?); cannot resume it"
        )
    try:
        return ReplayOptions.from_json(replay), Path(str(path))
    except ValueError as exc:
        raise UserError(f"{run_dir}: cannot read the run's options: {exc}") from None


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


def scenario_options(options: ReplayOptions, scenario: Scenario) -> ReplayOptions:
    """The replay options with what the scenario says about its client and servers."""
    client = scenario.client
    api = dataclasses.replace(
        options.api,
        kind=ApiKind(client.api),
        model=options.api.model or client.model,
        path=options.api.path or client.path,
    )
    return dataclasses.replace(
        options,
        api=api,
        vocab_size=client.vocab_size,
        first_token_id=client.first_token_id,
        cache_block_size=client.cache_block_size,
        integrity_seed=scenario.integrity_seed,
    )


def ready_scenarios(
    names: tuple[str, ...], plan: ReplayPlan, options: ReplayOptions
) -> list[Scenario]:
    """Every scenario loaded, validated and checked runnable with this plan, before any
    is deployed (one line naming the problem otherwise)."""
    scenarios = [load_scenario(n) for n in names]
    for s in scenarios:
        check_runnable(s.name, s.requires)
        check_prompts(plan, scenario_options(options, s))
    return scenarios


def require_emulation(scenarios: list[Scenario], emulate: bool) -> None:
    """Refuse (exit 2, one line) when a scenario has WAN links this machine cannot emulate:
    a loopback run would pass for a WAN result. ``--no-emulation`` (emulate=False) is the
    user saying so; those runs are labelled (``EmulationStatus``)."""
    if emulate and any(s.network is not None for s in scenarios):
        problem = emulation_problem()
        if problem is not None:
            raise UserError(
                f"cannot emulate the WAN: {problem}; or pass --no-emulation to run on"
                " loopback (the results are then labelled WAN NOT EMULATED)"
            )


def replay_scenarios(
    names: tuple[str, ...],
    *,
    plan: ReplayPlan,
    options: ReplayOptions,
    out_root: Path,
    argv: list[str],
    trace_info: dict[str, object],
    emulate: bool,
    check_probes: bool,
    locust: LocustSettings | None = None,
) -> tuple[list[RunPaths], bool, int]:
    """Deploy each scenario in turn and replay the same plan; (runs, interrupted, failed)."""
    scenarios = ready_scenarios(names, plan, options)
    require_emulation(scenarios, emulate)
    from pddbench.netem.backend import backend_here

    backend = backend_here() if emulate else "nfqueue"
    if emulate:  # an automatic scale is checked on this host first (deploy.scale_probe)
        from pddbench.harness.deploy.scale_probe import probed

        say = lambda line: click.echo(line, err=True)  # noqa: E731
        scenarios = [probed(s, backend, echo=say) for s in scenarios]
    scenarios = [s.resolved(backend) for s in scenarios]  # the scale is fixed and recorded
    runs: list[RunPaths] = []
    failed = 0
    for scenario in scenarios:
        paths = new_run(out_root, scenario.name)
        manifest = RunManifest.begin(argv=argv, run_id=paths.run_id)
        manifest.scenario = scenario.manifest()
        manifest.trace = trace_info
        manifest.probe_check = check_probes
        manifest.emulation = EmulationStatus(
            applicable=scenario.network is not None,
            emulated=emulate and scenario.network is not None,
            reason="" if emulate else "--no-emulation",
        )
        manifest.save(paths.root)
        outcome = replay_one(
            scenario,
            paths,
            manifest,
            plan=plan,
            options=options,
            emulate=emulate,
            check_probes=check_probes,
            locust=locust,
        )
        if outcome is None:
            failed += 1
            continue
        runs.append(outcome.paths)
        if outcome.interrupted:
            return runs, True, failed
    return runs, False, failed


def replay_one(
    scenario: Scenario,
    paths: RunPaths,
    manifest: RunManifest,
    *,
    plan: ReplayPlan,
    options: ReplayOptions,
    emulate: bool,
    check_probes: bool,
    locust: LocustSettings | None = None,
    resume: ResumePoint | None = None,
) -> ReplayOutcome | None:
    """Deploy one scenario, replay ``plan`` into ``paths``, tear down; None when it failed
    (the failure is recorded in the manifest). Ctrl-C during deployment is an interrupted
    outcome."""
    opts = scenario_options(options, scenario)
    run_plan = plan
    if opts.cache_block_size != options.cache_block_size:
        run_plan = prepare_theoretical(plan, opts)
    click.echo(f"pddbench: deploying {scenario.name} ...", err=True)
    try:
        with deploy(scenario, paths, emulate=emulate, check_probes=check_probes) as (
            info,
            client_ns,
        ):
            manifest.deployment = dataclasses.asdict(info)
            manifest.links = info.links

            def drive() -> ReplayOutcome:
                if locust is not None:  # master and workers start inside the namespace
                    return locust.run(
                        run_plan, opts, info.front_door, paths, manifest, label=scenario.name
                    )
                return run_replay(
                    run_plan,
                    opts,
                    info.front_door,
                    paths,
                    manifest,
                    live=LiveView(scenario.name),
                    metrics_urls=metrics_targets(info.instances),
                    resume=resume,
                )

            return run_in_client_netns(client_ns, drive)
    except KeyboardInterrupt:
        _record_failure(paths, manifest, "interrupted during deployment", RunStatus.INTERRUPTED)
        return ReplayOutcome(paths, 0, True, 0)
    except UserError as exc:
        click.echo(f"pddbench: {scenario.name}: {exc}", err=True)
        _record_failure(paths, manifest, str(exc), RunStatus.FAILED)
        return None


def _record_failure(paths: RunPaths, manifest: RunManifest, error: str, status: RunStatus) -> None:
    manifest.fail(status, error)
    manifest.save(paths.root)
