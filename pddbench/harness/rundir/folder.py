"""Run folders and manifests: where a run's results live and what configuration made them.

A run folder ``<out>/<run-id>/`` holds ``journal.jsonl`` (written while the run goes),
``requests.parquet`` (finalised from the journal), ``server_metrics.parquet``,
``links.parquet``, ``logs/`` and ``manifest.json``. The manifest carries the scenario
verbatim, the trace file's hash, the command line, versions, seeds, host, link probes and
start/end times (wall clock plus the monotonic anchor every time in the records is
relative to).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pddbench import __version__
from pddbench.errors import UserError


@dataclass(frozen=True)
class RunPaths:
    """The files of one run folder."""

    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def requests(self) -> Path:
        return self.root / "requests.parquet"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def server_metrics(self) -> Path:
        return self.root / "server_metrics.parquet"

    @property
    def links(self) -> Path:
        return self.root / "links.parquet"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def new_run(out_root: str | Path, label: str) -> RunPaths:
    """Create a fresh run folder ``<out_root>/<UTC time>-<label>-<random>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    root = Path(out_root) / f"{stamp}-{safe}-{secrets.token_hex(2)}"
    try:
        (root / "logs").mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        why = _why(exc)
        raise UserError(f"--out {out_root}: cannot create a run folder there: {why}") from None
    return RunPaths(root)


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


def _versions() -> dict[str, str]:
    out = {"pddbench": __version__, "python": sys.version.split()[0]}
    for pkg in ("aiohttp", "numpy", "pandas", "pyarrow", "pyroute2", "locust"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def host_info() -> dict[str, object]:
    """Facts about the machine that ran the client."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def base_manifest(*, argv: list[str], run_id: str) -> dict[str, object]:
    """The parts of a manifest known before the run starts."""
    return {
        "format": "pddbench-run",
        "format_version": 1,
        "run_id": run_id,
        "command": argv,
        "versions": _versions(),
        "host": host_info(),
        "started_at": datetime.now(UTC).isoformat(),
        "clock": {"kind": "monotonic", "origin_monotonic_s": None, "origin_wall": None},
        "status": "running",
    }


def anchor_clock(manifest: dict[str, object], origin_monotonic: float) -> None:
    """Record the wall-clock time that corresponds to monotonic ``origin_monotonic``."""
    wall = time.time() - (time.monotonic() - origin_monotonic)
    manifest["clock"] = {
        "kind": "monotonic",
        "origin_monotonic_s": origin_monotonic,
        "origin_wall": datetime.fromtimestamp(wall, UTC).isoformat(),
    }


def write_manifest(paths: RunPaths, manifest: dict[str, object]) -> None:
    """Write ``manifest.json`` atomically (safe to call repeatedly during a run)."""
    tmp = paths.manifest.with_suffix(".json.partial")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(paths.manifest)


def read_manifest(paths: RunPaths) -> dict[str, object]:
    return json.loads(paths.manifest.read_text())
