"""The body of ``pddbench replay``: trace → plan → (deploy →) replay → finalise → compare.

Kept apart from the click declarations so it can be called from tests and from other
commands (capacity search, nightly) with the same semantics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pddbench.errors import TraceError, UserError
from pddbench.harness.config.scenario import Scenario, load_scenario
from pddbench.harness.deploy.systems import deploy, emulation_problem, enter_netns
from pddbench.harness.drive.client import ApiKind
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.locust import LocustSettings
from pddbench.harness.drive.replay import (
    ReplayOptions,
    ReplayOutcome,
    ReplayPlan,
    prepare,
    prepare_theoretical,
    run_replay,
)
from pddbench.harness.drive.scrape import metrics_targets
from pddbench.harness.engines.requirements import check_runnable
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.report.summary import print_comparison
from pddbench.harness.rundir.folder import RunPaths, file_digest, new_run
from pddbench.harness.rundir.manifest import RunManifest, RunStatus
from pddbench.harness.rundir.records import read_journal
from pddbench.workloads.traceio import Trace, read_trace

EXIT_INTERRUPTED = 130


def load_trace(path: Path) -> Trace:
    """Read the trace; a missing file gets a hint on how to make one."""
    if not path.exists():
        raise UserError(
            f"trace {path} not found; make one with `pddbench trace synth --profile jan-feb "
            f"-o {path}` or import one with "
            f"`pddbench trace import mooncake|weka|azure SRC -o {path}`"
        )
    try:
        return read_trace(path)
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(f"{path}: cannot read trace ({type(exc).__name__}: {exc})") from None


def trace_manifest(trace: Trace, path: Path, plan: ReplayPlan) -> dict[str, object]:
    return {
        "path": str(path),
        "digest": file_digest(path),
        "requests": trace.num_requests,
        "epoch": trace.epoch,
        "source": trace.source,
        "replayed": plan.selection_note,
        "replayed_requests": len(plan.requests),
    }


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
) -> int:
    """Run the replays; returns the exit status (``locust``: use the Locust engine)."""
    trace = load_trace(trace_path)
    options, default_note = default_selection(trace.table, options, trace.epoch)
    if default_note:
        click.echo(f"pddbench: {default_note}", err=True)
    plan = prepare(trace, options)
    if not plan.requests:
        raise UserError(
            "the selection keeps no request (check --window / --sample / --max-requests)"
        )
    click.echo(f"pddbench: replaying {plan.selection_note}", err=True)
    trace_info = trace_manifest(trace, trace_path, plan)
    runs: list[RunPaths] = []
    interrupted = False
    if target is not None:
        if scenarios:
            raise UserError("--target drives an existing endpoint: give no --scenario with it")
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
            print_comparison(runs)
            return 1
    print_comparison(runs)
    return EXIT_INTERRUPTED if interrupted else 0


def resume_main(
    run_dir: Path,
    *,
    trace_path: Path,
    options: ReplayOptions,
    emulate: bool = True,
    check_probes: bool = True,
) -> int:
    """Continue an interrupted run in its own folder (``pddbench replay --resume RUN``).

    ``trace_path`` and ``options`` are the run's own (re-read from its manifest's command
    line); the plan is rebuilt from them and only what the journal has not settled is
    sent (:mod:`pddbench.harness.plan.resume`). The servers are deployed afresh, so their
    caches start cold: the manifest's ``resumes`` entry says where that happened."""
    paths = RunPaths(run_dir)
    manifest = RunManifest.load(paths.root)
    if manifest.status == RunStatus.COMPLETE:
        raise UserError(f"{run_dir}: the run is complete; nothing to resume")
    if not paths.journal.exists():
        raise UserError(f"{run_dir}: no journal.jsonl; the run never started sending")
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
            emulate=emulate and manifest.emulation_fallback is None,
            check_probes=check_probes,
            resume=point,
        )
    if outcome is None:
        return 1
    print_comparison([outcome.paths])
    return EXIT_INTERRUPTED if outcome.interrupted else 0


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
    scenarios = [load_scenario(n) for n in names]  # all validated before anything starts
    fallback = None
    if emulate and any(s.network is not None for s in scenarios):
        problem = emulation_problem()
        if problem is not None:
            fallback = f"WAN not emulated ({problem}); the servers run on loopback"
            click.echo(
                f"pddbench: WARNING: {fallback}. Transfer times are NOT the scenario's "
                "links: run as root with iptables (or a netem kernel) for real numbers, or "
                "pass --no-emulation to silence this.",
                err=True,
            )
            emulate = False
    for s in scenarios:
        check_runnable(s.name, s.requires)
    runs: list[RunPaths] = []
    failed = 0
    for scenario in scenarios:
        paths = new_run(out_root, scenario.name)
        manifest = RunManifest.begin(argv=argv, run_id=paths.run_id)
        manifest.scenario = scenario.manifest()
        manifest.trace = trace_info
        if fallback is not None:
            manifest.emulation_fallback = fallback
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
            with enter_netns(client_ns):
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
    except KeyboardInterrupt:
        _record_failure(paths, manifest, "interrupted during deployment", RunStatus.INTERRUPTED)
        return ReplayOutcome(paths, 0, True, 0)
    except UserError as exc:
        click.echo(f"pddbench: {scenario.name}: {exc}", err=True)
        _record_failure(paths, manifest, str(exc), RunStatus.FAILED)
        return None


def _record_failure(
    paths: RunPaths, manifest: RunManifest, error: str, status: RunStatus
) -> None:
    manifest.fail(status, error)
    manifest.save(paths.root)
