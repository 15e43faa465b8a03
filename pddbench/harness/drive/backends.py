"""The backends a run is driven by: one protocol, and the asyncio engine behind it.

Owns :class:`Backend` and :class:`Drive`: what
:func:`~pddbench.harness.jobs.run_system.run_system` asks of whatever sends a plan's
requests into a run folder; and :class:`AsyncioBackend` (the
default, :func:`~pddbench.harness.drive.replay.run_replay`). Locust's
:class:`~pddbench.harness.drive.locust.launcher.LocustSettings` is the other.
:class:`ModelBackend` is what a backend that *is* the system (a model of the scenario:
the virtual-time twin, :class:`pddbench.twin.backend.VirtualBackend`) offers instead:
nothing is deployed; it is handed the scenario, and settles at once. A backend finalises
the run folder it was given (records, manifest status) on success, error and
interruption alike. Must not deploy anything nor open run folders (the job does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.quiesce import Quiet
from pddbench.harness.drive.replay import ReplayOutcome, ReplayPlan, run_replay
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest


@dataclass(frozen=True)
class Drive:
    """One run for a backend to drive: the plan and options, where to send them, the run
    folder to finalise, and (when the backend can) the instances' ``/metrics`` to scrape
    and the point an interrupted run resumes from."""

    plan: ReplayPlan
    options: ReplayOptions
    base_url: str
    paths: RunPaths
    manifest: RunManifest
    label: str = ""
    metrics_urls: Mapping[str, str] | None = None
    resume: ResumePoint | None = None


class Backend(Protocol):
    """Sends a run's plan and finalises its folder; runs in the client's place."""

    def drive(self, run: Drive) -> ReplayOutcome: ...


@runtime_checkable
class ModelBackend(Protocol):
    """Runs a model of a scenario's system in place of a deployment (``run.base_url`` is
    unused) and finalises the folder; :meth:`settle` is its answer to "have the servers
    finished the run's work?" (a model that runs every request to its end: at once)."""

    def drive_model(self, scenario: Scenario, run: Drive) -> ReplayOutcome: ...

    def settle(self) -> Quiet: ...


@dataclass(frozen=True)
class AsyncioBackend:
    """The asyncio engine in this process, with a live view; scrapes ``metrics_urls``."""

    def drive(self, run: Drive) -> ReplayOutcome:
        return run_replay(
            run.plan,
            run.options,
            run.base_url,
            run.paths,
            run.manifest,
            live=LiveView(run.label),
            metrics_urls=run.metrics_urls,
            resume=run.resume,
        )
