"""Fits the emulated deployment's host costs: an emulated run against the twin of its plan.

Owns :func:`fit_run`: reads an emulated replay's run folder (its manifest's replay options
and scenario, its records), plans the same requests from the trace as the replay did,
replays them through the twin (with a link-model file's links and host costs, when given)
and fits :class:`~pddbench.twin.host.HostCosts` hop by hop, paired by request id
(:func:`~pddbench.twin.host.costs_from`); a hop's cost shows in later parts too, so
the twin is re-run with each fit and the residuals added, round after round. Owns
:func:`fit_points` too: the same rounds (:func:`refine`) on a plan the caller's twin runs
(the main job's emulated walk's first point; the twin's, the same trace window at the
same rate).
Must not run an emulated replay or write the file (``pddbench twin fit-host`` does).
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from pddbench.errors import UserError
from pddbench.harness.config.scenario import Scenario, load_scenario
from pddbench.harness.drive.replay import prepare
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.twin.backend import replay_records, twin_config
from pddbench.twin.calibrate import LinkModelFile, Measured
from pddbench.twin.host import NONE, HopFit, HostCosts, costs_from, hop_excess
from pddbench.workloads.traceio import Trace


def host_only_file(run_dir: Path, scenario: Scenario | None = None) -> LinkModelFile:
    """A link-model file with no fitted links (the scenario's configured ones stand), for
    the host costs of a run whose scenario has no WAN to calibrate."""
    manifest = emulated_manifest(run_dir)
    name = scenario.name if scenario is not None else manifest.scenario_name
    measured = Measured(
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        kernel=platform.release(),
        scenario=name,
        scale=_recorded_scale(manifest),
    )
    return LinkModelFile(measured=measured, directions=[])


def _recorded_scale(manifest: RunManifest) -> float:
    """The emulation scale the run recorded with its scenario (1 when it has none)."""
    extra = (manifest.scenario.model_extra or {}) if manifest.scenario is not None else {}
    scale = extra.get("emulation_scale")
    return float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0


@dataclass(frozen=True)
class FitRound:
    """One round: the costs the twin ran with, and each hop's residual against them."""

    costs: HostCosts
    residuals: list[HopFit]


def emulated_manifest(run_dir: Path) -> RunManifest:
    """The run folder's manifest; a one-line error unless it is a finished emulated replay
    with its options recorded."""
    try:
        manifest = RunManifest.load(run_dir)
    except (OSError, ValueError) as exc:
        raise UserError(f"{run_dir}: not a pddbench run folder ({exc})") from exc
    replay = manifest.replay
    if replay is None or replay.options is None:
        raise UserError(f"{run_dir}: the manifest records no replay options to plan from")
    if replay.backend == "virtual":
        raise UserError(f"{run_dir} is a virtual run: fit on an emulated one")
    if manifest.emulation is not None and not manifest.emulation.emulated:
        raise UserError(f"{run_dir} ran without WAN emulation (--no-emulation)")
    records = run_dir / "requests.parquet"
    if not records.exists():
        raise UserError(f"{run_dir} has no requests.parquet (pddbench finalize {run_dir})")
    return manifest


def fit_run(
    run_dir: Path,
    trace: Trace,
    *,
    scenario: Scenario | None = None,
    link_model: LinkModelFile | None = None,
    rounds: int = 3,
) -> list[FitRound]:
    """The rounds of the fit (the last one's ``costs`` are the fit; its residuals, what
    is left); ``scenario``: the run's own built-in scenario unless given."""
    manifest = emulated_manifest(run_dir)
    emulated = pd.read_parquet(run_dir / "requests.parquet")
    assert manifest.replay is not None and manifest.replay.options is not None
    options = manifest.replay.options
    sc = scenario or load_scenario(manifest.scenario_name)
    dep, net = twin_config(sc, link_model)
    plan = prepare(trace, options)
    source = f"fitted on {run_dir.name} ({sc.name}, {len(emulated)} records)"
    start = link_model.host if link_model is not None else NONE
    caps = link_model.flow_caps() if link_model is not None else None

    def twin(costs: HostCosts) -> pd.DataFrame:
        records = replay_records(plan, options, dep, net, host=costs, flow_caps=caps)
        return pd.DataFrame([vars(r) for r in records])

    return refine(emulated, twin, source, start, rounds, wan=wan_is_hosts(link_model))


def wan_is_hosts(link_model: LinkModelFile | None) -> bool:
    """Whether the twin runs the configured WAN (no fitted direction in ``link_model``),
    so a WAN transfer's residual is this host's and is fitted as sending and landing
    (:func:`~pddbench.twin.host.hop_excess`'s ``wan``)."""
    return link_model is None or not link_model.directions


def refine(
    emulated: pd.DataFrame,
    twin: Callable[[HostCosts], pd.DataFrame],
    source: str,
    start: HostCosts,
    rounds: int,
    *,
    wan: bool = False,
) -> list[FitRound]:
    """The rounds of a fit: ``twin(costs)`` (the twin's records of the emulated run's
    plan, run with ``costs``) from ``start``, each round's costs the last plus its
    residuals (:func:`costs_from`); ``rounds`` refits, so ``rounds + 1`` twin runs, the
    last only measuring what the fit leaves. ``wan``: the twin runs the configured WAN
    (no fitted link), so its transfers' residual is fitted as sending and landing too
    (:func:`~pddbench.twin.host.hop_excess`)."""
    costs = start
    out: list[FitRound] = []
    for k in range(rounds + 1):
        if k:
            costs = costs_from(out[-1].residuals, source, start=costs)
        out.append(FitRound(costs, hop_excess(emulated, twin(costs), wan=wan)))
    return out


def fit_points(
    emulated_dir: Path,
    twin_first: Path,
    rerun: Callable[[HostCosts], Path],
    rounds: int = 2,
    *,
    wan: bool = False,
) -> list[FitRound]:
    """:func:`refine` from an emulated run and the twin's run of the same plan at no host
    costs (``twin_first``), re-run with costs by ``rerun`` (its run folder): the main job's
    check fits on its walks' first points, a steady ladder point whose plan (sessions in
    progress, primed caches) :func:`fit_run`'s replay options cannot re-plan. ``wan``:
    :func:`refine`'s."""
    emulated_manifest(emulated_dir)
    e = pd.read_parquet(emulated_dir / "requests.parquet")
    source = f"fitted on {emulated_dir.name} ({len(e)} records, {rounds} rounds)"

    def twin(costs: HostCosts) -> pd.DataFrame:
        folder = twin_first if costs == NONE else rerun(costs)
        try:
            return pd.read_parquet(folder / "requests.parquet")
        except (OSError, ValueError) as exc:
            raise UserError(f"host costs: {folder} has no readable records ({exc})") from exc

    return refine(e, twin, source, NONE, rounds, wan=wan)
