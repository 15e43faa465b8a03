"""Running one system into one run folder: the one way every job drives a system.

Owns the sequence every job shares — check the inputs (:func:`preflight`, before any
side effect), fix the emulation scale (:func:`fix_scale`: probe this host for an
``auto`` scale), open the run folder with its head (:func:`~pddbench.harness.rundir.
manifest.open_run`, so a failed deployment is recorded there), deploy the scenario or
attach to a system that is already up (:class:`Attached`: an external ``--target``, or
the deployment a ladder holds across its points), drive the plan with the chosen
:class:`~pddbench.harness.drive.backends.Backend` in the client's namespace, settle
(optionally wait until the servers finished the run's work), close (the backend
finalises the folder; a failed deployment is recorded). A
:class:`~pddbench.harness.drive.backends.ModelBackend` (``--backend virtual``: the twin)
takes the place of the deployment: no emulation check, no scale probe, nothing deployed,
the same run folder. ``pddbench replay`` (scenarios,
``--target``, ``--resume``), the capacity ladder, the main job and nightly all come
through :func:`run_system`; the experiments run those commands.

Must not decide what to replay, at which load, nor how to judge it (the jobs do).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import check_out_folder
from pddbench.harness.config.replay import ApiKind, ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.deploy.systems import Readiness, deploy, emulation_problem
from pddbench.harness.drive.backends import AsyncioBackend, Backend, Drive, ModelBackend
from pddbench.harness.drive.locust import LocustSettings
from pddbench.harness.drive.netns import run_in_client_netns
from pddbench.harness.drive.prime import prime_deployment
from pddbench.harness.drive.quiesce import Quiet, wait_quiet
from pddbench.harness.drive.replay import (
    ReplayOutcome,
    ReplayPlan,
    check_prompts,
    prepare_theoretical,
)
from pddbench.harness.drive.scrape import metrics_targets
from pddbench.harness.engines.requirements import check_runnable
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.rundir.emulation import EmulationStatus
from pddbench.harness.rundir.folder import RunPaths, check_out_root
from pddbench.harness.rundir.manifest import RunHead, RunManifest, RunStatus, open_run
from pddbench.harness.rundir.sections import DeploymentInfo

if TYPE_CHECKING:
    from pddbench.twin.calibrate import LinkModelSource

Echo = Callable[[str], None]


def _stderr(line: str) -> None:
    click.echo(line, err=True)


@dataclass(frozen=True)
class Attached:
    """A system that is already up: where its front door is and where the client runs."""

    front_door: str
    label: str
    client_ns: str | None = None  # None: here (loopback, or an external target)
    metrics_urls: Mapping[str, str] | None = None  # scraped during the replay
    deployment: DeploymentInfo | None = None  # None: not ours (an external target)
    ready: Readiness | None = None  # the deployment's client-side readiness (once)

    @classmethod
    def of(
        cls, info: DeploymentInfo, client_ns: str | None, label: str, ready: Readiness
    ) -> Attached:
        """A deployment this job brought up (and keeps up across runs)."""
        return cls(info.front_door, label, client_ns, metrics_targets(info.instances), info, ready)


@dataclass(frozen=True)
class RunSettings:
    """Where a job's runs go and how they are made, alike for each of its systems."""

    out_root: Path
    argv: list[str]  # the command line, recorded in every run's manifest
    emulate: bool = True  # False: --no-emulation (loopback; the runs say so)
    check_probes: bool = True  # False: --no-probe-check
    virtual: bool = False  # --backend virtual: the twin in virtual time (nothing deployed)
    link_model: LinkModelSource | None = None  # --link-model: the twin's calibrated links

    def preflight(
        self, scenarios: Sequence[Scenario], plan: ReplayPlan | None, options: ReplayOptions
    ) -> None:
        """:func:`preflight` of these runs' inputs (virtual: reference servers only)."""
        if self.virtual:
            require_reference(scenarios)
        emulate = self.emulate and not self.virtual
        preflight(scenarios, plan, options, out_root=self.out_root, emulate=emulate)

    def backend(self, locust: LocustSettings | None = None) -> Backend | ModelBackend:
        """What drives these runs: the twin (virtual), Locust when given, else asyncio."""
        if self.virtual:
            from pddbench.twin.backend import VirtualBackend

            return VirtualBackend(link_model=self.link_model)
        return locust or AsyncioBackend()

    def fixed(self, scenario: Scenario, echo: Echo = _stderr) -> Scenario:
        """:func:`fix_scale`; virtual: full scale, no probe (the twin shapes no link)."""
        if self.virtual:
            return scenario.model_copy(
                update={"emulation_scale": 1.0, "scale_source": "virtual time: full scale"}
            )
        return fix_scale(scenario, self.emulate, echo)

    def emulation(self, scenario: Scenario) -> EmulationStatus | None:
        """:func:`emulation_status`; None for a virtual run (its WAN is the twin's link
        model, and the report labels it VIRTUAL TIME from ``replay.backend``)."""
        return None if self.virtual else emulation_status(scenario, self.emulate)


@dataclass(frozen=True)
class NewRun:
    """A run folder to open under the job's ``out_root`` (``label``: its name's middle)."""

    label: str
    head: RunHead


@dataclass(frozen=True)
class OpenRun:
    """A run folder that already exists (``--resume``)."""

    paths: RunPaths
    manifest: RunManifest


@dataclass(frozen=True)
class SystemRun:
    """What driving one system gave: the replay's outcome and, when asked to settle, how
    the servers finished the run's work."""

    outcome: ReplayOutcome
    manifest: RunManifest
    quiet: Quiet | None = None


def preflight(
    scenarios: Sequence[Scenario],
    plan: ReplayPlan | None,
    options: ReplayOptions,
    *,
    out_root: Path | None,
    emulate: bool,
) -> None:
    """The input checks of a job, run before any side effect (one line, exit 2, naming the
    problem): the scenarios runnable here (their WAN emulable unless ``--no-emulation``),
    the plan's prompts buildable at each client's vocabulary (``plan`` None: the job plans
    later, per point), the output folder writable. A job's runs start only after their
    inputs passed this; a new input check belongs here. The emulation check comes last of
    the checks that read: it probes a scratch network namespace, which bad input must never
    cause."""
    if out_root is not None:
        check_out_folder(out_root)  # read-only: --out not a file, nor under one
    for s in scenarios:
        check_runnable(s.name, s.requires)
    if plan is not None:
        for opts in [scenario_options(options, s) for s in scenarios] or [options]:
            check_prompts(plan, opts)
    require_emulation(scenarios, emulate)
    if out_root is not None:
        check_out_root(out_root)


def require_emulation(scenarios: Sequence[Scenario], emulate: bool) -> None:
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


def require_reference(scenarios: Sequence[Scenario]) -> None:
    """Refuse (exit 2, one line) a virtual run of a scenario that is not reference servers:
    the twin models the reference deployment only, not a real engine."""
    for s in scenarios:
        if not s.is_reference:
            raise UserError(
                f"--backend virtual: scenario {s.name} runs real engines; the twin models "
                "reference-server scenarios only"
            )


def fix_scale(scenario: Scenario, emulate: bool, echo: Echo = _stderr) -> Scenario:
    """The scenario with its emulation scale fixed for this host, to be recorded: an
    automatic scale is checked on this host first (:mod:`~pddbench.harness.deploy.
    scale_probe`); without emulation the scale is the loopback backend's."""
    from pddbench.netem.backend import backend_here

    backend = backend_here() if emulate else "nfqueue"
    if emulate:
        from pddbench.harness.deploy.scale_probe import probed

        scenario = probed(scenario, backend, echo=echo)
    return scenario.resolved(backend)


def emulation_status(scenario: Scenario, emulate: bool) -> EmulationStatus:
    """The manifest's record of whether this scenario's WAN is emulated in this run."""
    return EmulationStatus(
        applicable=scenario.network is not None,
        emulated=emulate and scenario.network is not None,
        reason="" if emulate else "--no-emulation",
    )


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


def run_system(
    system: Scenario | Attached,
    plan: ReplayPlan,
    options: ReplayOptions,
    *,
    run: NewRun | OpenRun,
    backend: Backend | ModelBackend,
    settings: RunSettings,
    settle_timeout_s: float | None = None,
    resume: ResumePoint | None = None,
) -> SystemRun | None:
    """Drive ``plan`` into one run folder against ``system``: a scenario is deployed for
    this run (its options made the scenario's, :func:`scenario_options`) and torn down
    after; an :class:`Attached` system is used as it is. With ``settle_timeout_s`` the
    servers' busy series is waited on after the last answer (:func:`wait_quiet`).

    A scenario that fails to deploy is recorded (status ``failed``) and gives None; Ctrl-C
    during its deployment gives an interrupted outcome. For an attached system errors
    propagate. A :class:`ModelBackend` runs a scenario in place of its deployment."""
    if isinstance(run, NewRun):
        paths, manifest = open_run(settings.out_root, run.label, argv=settings.argv, head=run.head)
    else:
        paths, manifest = run.paths, run.manifest

    def drive(at: Attached, opts: ReplayOptions, run_plan: ReplayPlan) -> SystemRun:
        def client() -> SystemRun:
            if at.ready is not None:  # healthy from here, prewarmed: once per deployment
                at.ready()
                if at.deployment is not None:
                    manifest.deployment = at.deployment.recorded()
            if run_plan.priming is not None:  # a steady point: the history in the caches
                primed = prime_deployment(at.front_door, run_plan, opts)
                click.echo(f"pddbench: {at.label}: {primed.describe()}", err=True)
                if manifest.ladder_point is not None:
                    manifest.ladder_point.primed = primed.describe()
            # the WAN's counters around the replay itself (not the priming's messages)
            before = at.ready.wan_bytes() if at.ready is not None else None
            outcome = backend.drive(
                Drive(
                    run_plan,
                    opts,
                    at.front_door,
                    paths,
                    manifest,
                    label=at.label,
                    metrics_urls=at.metrics_urls,
                    resume=resume,
                )
            )
            if at.ready is not None and manifest.deployment is not None:
                after = at.ready.wan_bytes() if before is not None else None
                if before is not None and after is not None:
                    manifest.deployment.wan_bytes = {
                        key: {c: n - before.get(key, {}).get(c, 0) for c, n in counts.items()}
                        for key, counts in after.items()
                    }
                manifest.deployment.faults = at.ready.fault_records()
                manifest.save(paths.root)
            quiet = None
            if settle_timeout_s is not None and not outcome.interrupted:
                metrics = at.front_door.rstrip("/") + "/metrics"
                quiet = wait_quiet(metrics, settle_timeout_s)
            return SystemRun(outcome, manifest, quiet)

        return run_in_client_netns(at.client_ns, client)

    if isinstance(system, Attached):
        return drive(system, options, plan)
    scenario = system
    opts = scenario_options(options, scenario)
    run_plan = plan
    if opts.cache_block_size != options.cache_block_size:
        run_plan = prepare_theoretical(plan, opts)
    if isinstance(backend, ModelBackend):  # the twin: nothing to deploy, settles at once
        click.echo(f"pddbench: {scenario.name} in virtual time ...", err=True)
        outcome = backend.drive_model(
            scenario, Drive(run_plan, opts, "", paths, manifest, label=scenario.name)
        )
        return SystemRun(outcome, manifest, None if settle_timeout_s is None else backend.settle())
    click.echo(f"pddbench: deploying {scenario.name} ...", err=True)
    try:
        with deploy(
            scenario, paths, emulate=settings.emulate, check_probes=settings.check_probes
        ) as (
            info,
            client_ns,
            ready,
        ):
            manifest.deployment = info.recorded()
            manifest.links = info.links
            return drive(Attached.of(info, client_ns, scenario.name, ready), opts, run_plan)
    except KeyboardInterrupt:
        _record_failure(paths, manifest, "interrupted during deployment", RunStatus.INTERRUPTED)
        return SystemRun(ReplayOutcome(paths, 0, True, 0), manifest)
    except UserError as exc:
        click.echo(f"pddbench: {scenario.name}: {exc}", err=True)
        _record_failure(paths, manifest, str(exc), RunStatus.FAILED)
        return None


def _record_failure(paths: RunPaths, manifest: RunManifest, error: str, status: RunStatus) -> None:
    manifest.fail(status, error)
    manifest.save(paths.root)
