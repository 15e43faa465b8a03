"""Running the shared load ladder against one system: the I/O around :class:`LadderSearch`.

Deploys the scenario once and runs each point the search asks for as a short replay in
its own run folder (``<system>-x<load>``): the point's own trace window in steady state
(every request in it, as ``base speed-up × load`` concurrent slices, the caches primed
from the trace's history: :mod:`pddbench.harness.plan.steady`; its mix beside the
window's is measured and printed) or, for a cold ladder, the sessions that start in it
with arrivals compressed ``base speed-up × load``, sending for the
warm-up plus the measured time the search chose (powered points are sized, and their
load scales found for their rate rungs, from the trace's planned schedule,
:func:`trace_schedule`: the same for every system). Times
each point (sending + draining) for the search's time budget. Measures each point from its records
(:func:`measure_point`), prints progress with an
ETA, and writes the verdict (``capacity.json``, :class:`LadderVerdict`) beside the runs.
``pddbench capacity`` (:mod:`pddbench.harness.jobs.capacity`) and the main job both call
:func:`run_ladder`; each point is one :func:`~pddbench.harness.jobs.run_system.run_system`
on the deployment the walk holds.
After each point it waits for the servers to finish the point's work
(:func:`~pddbench.harness.drive.quiesce.wait_quiet`): still busy after
``QUIESCE_TIMEOUT_S`` (relayed requests answered while their WAN transfers pile up), the
point did not sustain its load — recorded, a miss for the search — and the next point
gets a fresh deployment. With the virtual backend (``RunSettings.virtual``) nothing is
deployed: each point is the twin's run of the scenario, and settles at once (the twin
finishes all work; the point record says so in ``settled``). Decides nothing itself:
what to run and how to read it is the sans-IO search's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from pddbench.harness.analysis.capacity import scheduler_lost_s
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.sla import check
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.config.sla import SLA
from pddbench.harness.deploy.systems import deploy
from pddbench.harness.drive.replay import prepare, prepare_steady
from pddbench.harness.jobs.run_system import (
    Attached,
    NewRun,
    RunSettings,
    run_system,
)
from pddbench.harness.plan.ladder import (
    LadderSearch,
    PointHealth,
    PointMeasure,
    wilson,
    window_selection,
)
from pddbench.harness.plan.ladder_points import LadderSettings, PointWindow, Schedule
from pddbench.harness.plan.schedule_index import ScheduleIndex
from pddbench.harness.plan.steady import SteadyIndex, SteadyPoint
from pddbench.harness.rundir.folder import new_run
from pddbench.harness.rundir.ladder import LadderVerdict, RequestMix, hit_bin_shares
from pddbench.harness.rundir.manifest import LadderPointInfo, RunHead
from pddbench.harness.rundir.sections import ScenarioSection, TraceInfo
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import Trace

# How long the servers may take to finish a point's work after its last answer
QUIESCE_TIMEOUT_S = 30.0


def ladder_origin(trace: Trace, options: ReplayOptions) -> float:
    """Where the ladder starts walking: the selection's window start, or the trace's."""
    if options.selection.window_start_s is not None:
        return options.selection.window_start_s
    arrival = trace.table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False)
    return float(arrival.min()) if arrival.size else 0.0


def trace_schedule(
    trace: Trace, options: ReplayOptions, steady: SteadyIndex | None = None
) -> Schedule:
    """The planned send offsets of a point from the trace (what sizes a powered point and
    finds its load scale for a rate rung): indexed once, so the many queries a rate rung
    makes are cheap; every system of the main job walks the same schedule. With
    ``steady``, a steady-state point's (its window's requests, in slices)."""
    index = steady or ScheduleIndex(trace.table, options.selection)
    base = options.selection.speedup

    def offsets(start_s: float, load: float, send_s: float) -> list[float]:
        return index.offsets(start_s, base * load, send_s * base * load, send_s)

    return offsets


def measure_point(
    records: RecordSet,
    sla: SLA,
    window: PointWindow,
    settings: LadderSettings,
    *,
    lost_s: float = 0.0,
    emulated: bool,
    probes_on: bool,
    steady: SteadyPoint | None = None,
) -> PointMeasure:
    """One ladder point's figures: requests intended in ``[warmup, warmup + measured)``
    (the window's own measured time: powered points differ in length)."""
    n = records.num
    intended = n["intended_send_s"]
    start, end = window.warmup_s, window.send_s
    sent = records.sent
    in_window = sent & (intended >= start) & (intended < end)
    warm = sent & (intended < start)
    sc = check(sla, records)
    bound = sla.e2e_bound(n["expected_output_tokens"])
    could_still_meet = (
        np.ones(records.n, dtype=bool)
        if bound is None
        else np.asarray(bound >= settings.request_limit_s) & np.ones(records.n, dtype=bool)
    )
    # cut by the request limit (run folders before the censored status recorded such a
    # cut as a timeout, so a timeout that could still have met its bound counts too)
    cut = records.censored | records.cat["status"].equals("timeout")
    censored = in_window & cut & could_still_meet
    measured = in_window & ~censored
    lag = records.schedule_lag_s[measured]
    lag = lag[np.isfinite(lag)]
    count = int(measured.sum())
    return PointMeasure(
        window=window,
        requests=count,
        met=int((sc.met & measured).sum()),
        met_by={
            "ttft": int((sc.ttft_ok & measured).sum()),
            "tpot": int((sc.tpot_ok & measured).sum()),
            "e2e": int((sc.e2e_ok & measured).sum()),
        },
        warmup_excluded=int(warm.sum()),
        censored=int(censored.sum()),
        measured_s=window.measure_s,
        offered_rps=count / window.measure_s,
        health=PointHealth(
            schedule_lag_p99_s=float(np.percentile(lag, 99)) if lag.size else None,
            scheduler_lost_s=lost_s,
            emulated=emulated,
            probes_on=probes_on,
        ),
        **(_mixes(records, measured, steady, window) if steady is not None else {}),
    )


def _mixes(
    records: RecordSet, measured: np.ndarray, steady: SteadyPoint, window: PointWindow
) -> dict[str, Any]:
    """A steady point's mixes: the requests it planned in its measured time, those it
    measured (intended there: a slow system delays later turns out of it), with their
    trace hit rates; the hit rates the servers reported for those; the trace window's."""
    served = records.served_hit_rate[measured]
    return {
        "planned_mix": steady.planned_mix(window.warmup_s, window.send_s),
        "mix": RequestMix.of(records.num["turn_index"][measured], records.hit_rate[measured]),
        "served_hit_bins": hit_bin_shares(served) if np.isfinite(served).any() else None,
        "trace_mix": steady.trace_mix,
        "primed_blocks": steady.priming.blocks,
    }


def point_info(window: PointWindow, request_limit_s: float, redeployed: str) -> LadderPointInfo:
    """The manifest's record of which ladder point a run is."""
    same = ("index", "trace_start_s", "trace_duration_s", "warmup_s")
    return LadderPointInfo(
        **{k: getattr(window, k) for k in same},
        point_s=window.measure_s,
        request_limit_s=request_limit_s,
        redeployed=redeployed,
    )


def run_ladder(
    scenario: Scenario,
    trace: Trace,
    options: ReplayOptions,
    settings: LadderSettings,
    sla: SLA,
    *,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    echo: Callable[[str], None] = lambda s: click.echo(s, err=True),
    schedule: Schedule | None = None,
    steady: SteadyIndex | None = None,
) -> tuple[LadderVerdict, list[Path]]:
    """Walk the ladder for ``scenario``; the verdict and the point run folders. Steady
    points (``settings.steady``) are planned from ``steady`` (indexed here if None)."""
    emulate, check_probes = run_settings.emulate, run_settings.check_probes
    virtual = run_settings.virtual
    emulate = emulate and not virtual
    scenario = run_settings.fixed(scenario, echo)  # the scale is fixed and recorded
    backend = run_settings.backend()
    base_speedup = options.selection.speedup
    if not settings.steady:
        steady = None
    elif steady is None:
        steady = SteadyIndex(trace.table, options.selection, warmup_s=settings.warmup_s)
    elif steady.warmup_s != settings.warmup_s:
        raise ValueError("the steady index's warm-up is not the ladder's")
    search = LadderSearch(
        settings,
        target_pct=sla.target_pct,
        origin_s=ladder_origin(trace, options),
        base_speedup=base_speedup,
        schedule=schedule or trace_schedule(trace, options, steady),
    )
    if search.origin_rps is not None:
        echo(f"pddbench: {scenario.name}: {settings.describe_walk(search.origin_rps)}")
    folders: list[Path] = []
    deploy_dir = new_run(run_settings.out_root, f"{scenario.name}-ladder")
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        info, client_ns, ready = (
            (None, None, None)
            if virtual  # the twin: nothing to deploy
            else stack.enter_context(
                deploy(scenario, deploy_dir, emulate=emulate, check_probes=check_probes)
            )
        )
        began = time.monotonic()  # the ETA is the points' (deployment is the caller's)
        backlog = ""
        while (window := search.next_window()) is not None:
            echo(f"pddbench: {scenario.name}: {search.progress(time.monotonic() - began)}")
            point_began = time.monotonic()  # a fresh deployment counts in the point's time
            redeployed = ""
            if backlog:  # the previous point left work behind: start this one afresh
                redeployed = f"the previous point's servers were {backlog}"
                echo(f"pddbench: {scenario.name}: {redeployed}: a fresh deployment")
                stack.close()
                info, client_ns, ready = stack.enter_context(
                    deploy(
                        scenario,
                        new_run(run_settings.out_root, f"{scenario.name}-ladder"),
                        emulate=emulate,
                        check_probes=check_probes,
                    )
                )
            opts = dataclasses.replace(
                options,
                selection=window_selection(options.selection, window, base_speedup),
                max_duration_s=window.send_s,
                api=dataclasses.replace(
                    options.api,
                    request_timeout_s=min(options.api.request_timeout_s, settings.request_limit_s),
                ),
            )
            point = None
            if steady is not None:
                point = steady.point(
                    window.trace_start_s,
                    base_speedup * window.load,
                    window.send_s,
                    think_policy=opts.think_policy,
                    point_index=window.index,
                )
                plan = prepare_steady(trace, point, opts)
            else:
                plan = prepare(trace, opts)
            label = f"{scenario.name}-x{window.load:.3g}"
            head = RunHead(
                scenario=ScenarioSection.model_validate(scenario.manifest()),
                trace=trace_info.model_copy(
                    update={
                        "replayed": plan.selection_note,
                        "replayed_requests": len(plan.requests),
                    }
                ),
                **({"deployment": info.recorded(), "links": info.links} if info else {}),
                load_scale=window.load,
                ladder_point=point_info(window, settings.request_limit_s, redeployed),
                probe_check=check_probes,
                emulation=run_settings.emulation(scenario),
            )
            done = run_system(
                Attached.of(info, client_ns, f"{scenario.name} x{window.load:.3g}", ready)
                if info and ready
                else scenario,
                plan,
                opts,
                run=NewRun(label, head),
                backend=backend,
                settings=run_settings,
                settle_timeout_s=QUIESCE_TIMEOUT_S,
            )
            assert done is not None  # an attached system's failures propagate
            if done.outcome.interrupted:
                raise KeyboardInterrupt
            # the point's work must have finished on the servers, not only on the client
            quiet, manifest, paths = done.quiet, done.manifest, done.outcome.paths
            assert quiet is not None and manifest.ladder_point is not None
            backlog = "" if quiet.quiet else quiet.describe()
            settle_s = quiet.waited_s if quiet.known else None
            manifest.ladder_point.settle_s = settle_s
            manifest.ladder_point.backlog = backlog
            manifest.ladder_point.settled = quiet.note
            manifest.save(paths.root)
            folders.append(paths.root)
            data = load_run(paths.root, token_times=False)
            m = measure_point(
                data.records,
                sla,
                window,
                settings,
                lost_s=scheduler_lost_s(data.server_metrics),
                emulated=emulate,
                probes_on=emulate and check_probes,
                steady=point,
            )
            wall_s = time.monotonic() - point_began  # planning, sending, draining, reading
            m = dataclasses.replace(
                m, wall_s=wall_s, settle_s=settle_s, backlog=backlog, settled=quiet.note
            )
            search.record(m)
            excluded = m.health.exclusion(settings)
            lo, hi = wilson(m.met, m.requests, settings.confidence)
            planned = (
                ""
                if window.planned_requests is None
                else f" of {window.planned_requests} planned"
                + ("" if window.planned_rps is None else f" ({window.planned_rps:.3g} req/s)")
            )
            echo(
                f"pddbench: {scenario.name} x{window.load:.3g}"
                f"{' (bisecting)' if window.bisect else ''}: {m.requests} requests{planned} in "
                f"{window.measure_s:g} s, offered {m.offered_rps:.3g} req/s "
                f"(+{m.warmup_excluded} warm-up, {m.censored} censored), "
                f"attainment {m.attainment:.1%} [{lo:.1%}, {hi:.1%}], goodput "
                f"{m.goodput_rps:.2f} req/s, {wall_s:.0f} s wall"
                + (f"; EXCLUDED: {excluded}" if excluded else "")
                + (f"; NOT SUSTAINED: the servers were {backlog}" if backlog else "")
            )
            if m.mix is not None and m.trace_mix is not None and m.planned_mix is not None:
                echo(f"pddbench:   planned  {m.planned_mix.text()}")
                echo(f"pddbench:   measured {m.mix.text()}")
                echo(f"pddbench:   window   {m.trace_mix.text()}")
    verdict = search.verdict(scenario.name)
    for folder in (folders[-1] if folders else deploy_dir.root, deploy_dir.root):
        verdict.save(folder)
    echo(f"pddbench: {verdict.describe()}")
    return verdict, folders
