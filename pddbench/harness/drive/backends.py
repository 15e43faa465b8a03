"""The backends a run is driven by: one protocol, and the asyncio engine behind it.

Owns :class:`Backend`, what :func:`~pddbench.harness.jobs.run_system.run_system` asks of
whatever sends a plan's requests into a run folder, and :class:`AsyncioBackend` (the
default, :func:`~pddbench.harness.drive.replay.run_replay`). Locust's
:class:`~pddbench.harness.drive.locust.launcher.LocustSettings` is the other; a
virtual-time backend would be a third. A backend finalises the run folder it was given
(records, manifest status) on success, error and interruption alike. Must not deploy
anything nor open run folders (the job does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.replay import ReplayOutcome, ReplayPlan, run_replay
from pddbench.harness.plan.resume import ResumePoint
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest


class Backend(Protocol):
    """Sends ``plan`` to ``base_url`` and finalises ``paths``; runs in the client's place."""

    def drive(
        self,
        plan: ReplayPlan,
        options: ReplayOptions,
        base_url: str,
        paths: RunPaths,
        manifest: RunManifest,
        *,
        label: str = "",
        metrics_urls: Mapping[str, str] | None = None,
        resume: ResumePoint | None = None,
    ) -> ReplayOutcome: ...


@dataclass(frozen=True)
class AsyncioBackend:
    """The asyncio engine in this process, with a live view; scrapes ``metrics_urls``."""

    def drive(
        self,
        plan: ReplayPlan,
        options: ReplayOptions,
        base_url: str,
        paths: RunPaths,
        manifest: RunManifest,
        *,
        label: str = "",
        metrics_urls: Mapping[str, str] | None = None,
        resume: ResumePoint | None = None,
    ) -> ReplayOutcome:
        return run_replay(
            plan,
            options,
            base_url,
            paths,
            manifest,
            live=LiveView(label),
            metrics_urls=metrics_urls,
            resume=resume,
        )
