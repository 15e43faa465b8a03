"""``pddbench finalize RUN``: turn an interrupted run's journal into ``requests.parquet``.

For runs whose harness died without finalising (SIGKILL, power loss): everything the
journal holds up to its last flush becomes the records table, and the manifest is marked
``recovered``.
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
    if not paths.journal.exists():
        raise UserError(f"{run_dir}: no journal.jsonl here (not a pddbench run folder?)")
    records, bad = finalize_journal(paths.journal, paths.requests)
    manifest = {}
    if paths.manifest.exists():
        try:
            manifest = json.loads(paths.manifest.read_text())
        except json.JSONDecodeError:
            manifest = {}
    if manifest.get("status") == "running":
        manifest["status"] = "recovered"
    manifest["records"] = records
    manifest["journal_unreadable_lines"] = bad
    write_manifest(paths, manifest)
    click.echo(
        f"{records} records -> {paths.requests}" + (f" ({bad} cut-off line skipped)" if bad else "")
    )
