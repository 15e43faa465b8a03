"""Run folders: where a run's results live, and the name of every file in one.

A run folder ``<out>/<run-id>/`` holds ``journal.jsonl`` (written while the run goes),
``sends.log`` (one line per request sent, as it is sent: :mod:`~.sends`),
``requests.parquet`` (finalised from the journal), ``server_metrics.parquet``,
``links.parquet``, ``capacity.json`` (capacity searches), ``main_verdict.json`` (the main
job's verdict, :mod:`~.main_verdict`, whose module names it), ``logs/`` and ``manifest.json``
(:class:`~pddbench.harness.rundir.manifest.RunManifest`: the scenario verbatim, the trace
file's hash, the command line, versions, seeds, host, link probes and start/end times).
The file names are defined here once; writers and readers use :class:`RunPaths`.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.rundir.main_verdict import MAIN_VERDICT

JOURNAL = "journal.jsonl"
SENDS = "sends.log"
REQUESTS = "requests.parquet"
MANIFEST = "manifest.json"
SERVER_METRICS = "server_metrics.parquet"
LINKS = "links.parquet"
CAPACITY = "capacity.json"
LOGS = "logs"
DEFAULT_OUT = "results"  # where run folders go when no --out is given


@dataclass(frozen=True)
class RunPaths:
    """The files of one run folder."""

    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL

    @property
    def sends(self) -> Path:
        return self.root / SENDS

    @property
    def requests(self) -> Path:
        return self.root / REQUESTS

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def server_metrics(self) -> Path:
        return self.root / SERVER_METRICS

    @property
    def links(self) -> Path:
        return self.root / LINKS

    @property
    def capacity(self) -> Path:
        return self.root / CAPACITY

    @property
    def main_verdict(self) -> Path:
        return self.root / MAIN_VERDICT

    @property
    def logs(self) -> Path:
        return self.root / LOGS


def new_run(out_root: str | Path, label: str) -> RunPaths:
    """Create a fresh run folder ``<out_root>/<UTC time>-<label>-<random>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    root = Path(out_root) / f"{stamp}-{safe}-{secrets.token_hex(2)}"
    try:
        (root / LOGS).mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        why = _why(exc)
        raise UserError(f"--out {out_root}: cannot create a run folder there: {why}") from None
    return RunPaths(root)


def started_in(command: list[str], run_root: Path) -> Path | None:
    """The folder a run's command was started in, from where its run folder lies and the
    ``--out`` it was given (a relative one; default :data:`DEFAULT_OUT`): relative paths in
    the command (its trace) are relative to it. None when it cannot be told (an absolute
    ``--out``, one with ``..``, or a run folder moved since)."""
    out = DEFAULT_OUT
    for i, arg in enumerate(command):
        if arg == "--out" and i + 1 < len(command):
            out = command[i + 1]
        elif arg.startswith("--out="):
            out = arg.removeprefix("--out=")
    parts = [p for p in Path(out).parts if p != "."]
    if Path(out).is_absolute() or ".." in parts:
        return None
    parent = run_root.resolve().parent
    if parts and list(parent.parts[-len(parts) :]) != parts:
        return None
    return Path(*parent.parts[: len(parent.parts) - len(parts)])


def check_out_root(out_root: str | Path) -> None:
    """Refuse (one line) an output folder that cannot receive run folders, before any run
    starts: it is created when missing; a file or a read-only folder is refused."""
    root = Path(out_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".pddbench-write-check-{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        raise UserError(f"--out {out_root}: cannot write run folders there: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def file_digest(path: str | Path, *, chunk: int = 1 << 22) -> str:
    """``blake2b:<hex>`` of a file's bytes (identifies the exact trace replayed)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return "blake2b:" + h.hexdigest()
