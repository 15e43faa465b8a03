"""The run manifest: one model that every writer saves and every reader loads.

Owns ``manifest.json``'s fields, the run's :class:`RunStatus`, and the two ways across
the disk boundary: :meth:`RunManifest.save` (atomic, repeatable during a run) and
:meth:`RunManifest.load` (a :class:`~pddbench.errors.UserError` line naming the file on
anything malformed). Writers — the replay, resume, finalize, the Locust launcher,
capacity, nightly — set attributes on one instance and save it; readers — analysis,
report, regress, resume — load it. On disk only the keys a run actually set are
written (``exclude_unset``), so a run folder reads as it always has; keys this model
does not declare are kept verbatim (old runs, synthetic runs).

Must not decide anything about a run (the writers do) nor read the records.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pddbench import __version__
from pddbench.errors import UNKNOWN_RUN_KEY, UserError, first_problem
from pddbench.harness.rundir.emulation import EmulationStatus
from pddbench.harness.rundir.folder import MANIFEST, RunPaths, new_run
from pddbench.harness.rundir.sections import (
    DeploymentInfo,
    HostInfo,
    LocustResult,
    ReplaySection,
    RunCounts,
    ScenarioSection,
    Section,
    TraceInfo,
)


class RunStatus(StrEnum):
    """Where a run stands (``manifest["status"]``)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # Locust: the run ended without every request (workers lost)
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    RECOVERED = "recovered"  # finalised by ``pddbench finalize`` after the harness died


class RunClock(Section):
    """The monotonic anchor every time in the records is relative to, and its wall time."""

    kind: str = "monotonic"
    origin_monotonic_s: float | None = None
    origin_wall: str | None = None
    authority: str | None = None  # who set it, when not this process ("locust master")


class ResumeEntry(Section):
    """One ``pddbench replay --resume`` of the run."""

    started_at: str
    from_s: float
    settled_before: int
    superseded_records: int
    remaining: int
    previous_clock: RunClock | None = None


class ServerMetricsInfo(Section):
    """How the instances' ``/metrics`` were scraped into ``server_metrics.parquet``."""

    interval_s: float
    scrapes: int
    rows: int
    failures: dict[str, int]  # per instance
    last_error: dict[str, str]  # per instance: the last failure's one line


class LadderPointInfo(Section):
    """Which load-ladder point a run is (``pddbench capacity``, the main job)."""

    index: int
    trace_start_s: float
    trace_duration_s: float
    warmup_s: float
    point_s: float
    request_limit_s: float
    # after the last answer: how long the servers took to finish the point's work (None:
    # a front door without busy series) and what was still busy when the wait ended ("":
    # nothing: the load was sustained); why this point got a fresh deployment ("": it did not);
    # ``settled``: why nothing was waited on, when that is known (virtual time)
    settle_s: float | None = None
    backlog: str = ""
    redeployed: str = ""
    settled: str = ""
    # a steady-state point: what its caches were primed with before it ("": not primed)
    primed: str = ""


class RunManifest(RunCounts):
    """``manifest.json``: the configuration that made a run and how the run went (the
    request counts: :class:`RunCounts`)."""

    model_config = ConfigDict(extra="allow")

    format: str = "pddbench-run"
    format_version: int = 1
    run_id: str
    synthetic: bool = False  # written by analysis.synthetic, never by a replay
    command: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    host: HostInfo = Field(default_factory=HostInfo)
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    clock: RunClock = Field(default_factory=RunClock)
    status: RunStatus = RunStatus.RUNNING
    error: str | None = None
    # what was run
    scenario: ScenarioSection = Field(default_factory=ScenarioSection)
    trace: TraceInfo = Field(default_factory=TraceInfo)
    load_scale: float | None = None
    ladder_point: LadderPointInfo | None = None  # a capacity-ladder point's trace window
    emulation: EmulationStatus | None = None  # whether the WAN was emulated (replay)
    emulation_fallback: str | None = None  # older runs' note (before ``emulation``)
    probe_check: bool | None = None  # False: ``--no-probe-check`` (resume keeps it)
    deployment: DeploymentInfo | None = None
    links: list[Any] = Field(default_factory=list)  # the link probes (deployment.links)
    replay: ReplaySection | None = None
    event_loop: str | None = None
    # how it went
    resumes: list[ResumeEntry] = Field(default_factory=list)
    server_metrics: ServerMetricsInfo | None = None
    journal_unreadable_lines: int | None = None
    incomplete_reasons: list[str] | None = None
    suspect: bool | None = None
    suspect_reasons: list[str] | None = None
    locust: LocustResult | None = None

    @classmethod
    def begin(cls, *, argv: list[str], run_id: str) -> RunManifest:
        """The parts of a manifest known before the run starts (status ``running``)."""
        return cls(
            format="pddbench-run",
            format_version=1,
            run_id=run_id,
            command=list(argv),
            versions=_versions(),
            host=host_info(),
            started_at=datetime.now(UTC).isoformat(),
            clock=RunClock(),
            status=RunStatus.RUNNING,
        )

    def anchor_clock(self, origin_monotonic: float) -> None:
        """Record the wall-clock time that corresponds to monotonic ``origin_monotonic``."""
        wall = time.time() - (time.monotonic() - origin_monotonic)
        self.clock = RunClock(
            kind="monotonic",
            origin_monotonic_s=origin_monotonic,
            origin_wall=datetime.fromtimestamp(wall, UTC).isoformat(),
        )

    def finish(self, status: RunStatus, *, records: int, unreadable_lines: int) -> None:
        """The end of a run: its status, when it ended and what its journal finalised to."""
        self.ended_at = datetime.now(UTC).isoformat()
        self.status = status
        self.records = records
        self.journal_unreadable_lines = unreadable_lines

    def fail(self, status: RunStatus, error: str) -> None:
        """A run that ended before its replay did (deployment failed or was interrupted)."""
        self.status = status
        self.error = error

    @property
    def scenario_name(self) -> str:
        return self.scenario.name or self.run_id

    def to_json(self) -> dict[str, Any]:
        """The manifest as it stands on disk (only the keys that were set)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def save(self, folder: str | Path) -> None:
        """Write ``<folder>/manifest.json`` atomically (safe to call repeatedly)."""
        path = Path(folder) / MANIFEST
        tmp = path.with_suffix(".json.partial")
        text = json.dumps(self.to_json(), indent=2, sort_keys=True, default=str)
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, folder: str | Path) -> RunManifest:
        """Read ``<folder>/manifest.json``; :class:`UserError` naming the file if it is bad."""
        folder = Path(folder)
        path = folder / MANIFEST
        if not path.is_file():
            raise UserError(f"{folder}: not a run folder (no {MANIFEST})")
        try:
            raw = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, json.JSONDecodeError, RecursionError) as exc:
            raise UserError(f"{path}: cannot read JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise UserError(f"{path}: expected a JSON object")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            loc, msg = first_problem(exc, unknown=UNKNOWN_RUN_KEY)
            raise UserError(f"{path}: {loc}: {msg}") from None


class RunHead(BaseModel):
    """What a run's manifest says before its replay starts: what is run, on what, how.

    Only the fields given are written (a ``--target`` run has no emulation, a replay no
    ladder point), as every run folder has always had it."""

    model_config = ConfigDict(frozen=True)

    scenario: ScenarioSection
    trace: TraceInfo
    probe_check: bool | None = None
    emulation: EmulationStatus | None = None
    deployment: DeploymentInfo | None = None
    links: list[Any] | None = None
    load_scale: float | None = None
    ladder_point: LadderPointInfo | None = None

    def written(self, manifest: RunManifest) -> None:
        """Set the given fields on ``manifest``."""
        for key in self.model_fields_set:
            setattr(manifest, key, getattr(self, key))


def open_run(
    out_root: str | Path, label: str, *, argv: list[str], head: RunHead
) -> tuple[RunPaths, RunManifest]:
    """A fresh run folder with its manifest's head saved (status ``running``): a run that
    fails before its replay (deployment, probes) is recorded there."""
    paths = new_run(out_root, label)
    manifest = RunManifest.begin(argv=argv, run_id=paths.run_id)
    head.written(manifest)
    manifest.save(paths.root)
    return paths, manifest


def _versions() -> dict[str, str]:
    out = {"pddbench": __version__, "python": sys.version.split()[0]}
    for pkg in ("aiohttp", "numpy", "pandas", "pyarrow", "pyroute2", "locust"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def host_info() -> HostInfo:
    """Facts about the machine that ran the client."""
    return HostInfo(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        kernel=platform.release(),
        cpus=os.cpu_count(),
        python=sys.version.split()[0],
    )
