"""``pddbench finalize RUN``: turn an interrupted run's journal into ``requests.parquet``.

For runs whose harness died without finalising (SIGKILL, power loss): everything the
journal holds up to its last flush becomes the records table, lines that are not
records (cut off, not JSON, not a record) are skipped and counted, and the manifest is
marked ``recovered``. A ``requests.parquet`` is never replaced by one with fewer records.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.rundir.folder import RunPaths, write_manifest
from pddbench.harness.rundir.records import finalize_journal


@click.command("finalize")
@click.argument("run_dir", type=click.Path(path_type=Path))
def finalize(run_dir: Path) -> None:
    """Finalise RUN_DIR's journal into requests.parquet (after a crash)."""
    paths = RunPaths(run_dir)
    if not paths.journal.is_file():
        raise UserError(f"{run_dir}: no journal.jsonl here (not a pddbench run folder?)")
    try:
        records, bad = finalize_journal(paths.journal, paths.requests)
        manifest = _manifest(paths)
        if manifest.get("status") == "running":
            manifest["status"] = "recovered"
        manifest["records"] = records
        manifest["journal_unreadable_lines"] = bad
        write_manifest(paths, manifest)
    except OSError as exc:
        raise UserError(f"{run_dir}: cannot finalise: {exc.strerror or exc}") from None
    note = f" ({bad} unreadable journal line(s) skipped)" if bad else ""
    click.echo(f"{records} records -> {paths.requests}{note}")


def _manifest(paths: RunPaths) -> dict[str, object]:
    """The run's manifest, or an empty one when it is missing or not a JSON object."""
    try:
        data = json.loads(paths.manifest.read_text(errors="replace"))
    except (OSError, json.JSONDecodeError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
