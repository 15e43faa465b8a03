"""``pddbench finalize RUN``: turn an interrupted run's journal into ``requests.parquet``.

For runs whose harness died without finalising (SIGKILL, power loss): everything the
journal holds up to its last flush becomes the records table, lines that are not
records (cut off, not JSON, not a record) are skipped and counted, and the manifest is
marked ``recovered``, with the count of requests sent from the send log (those in
flight at the kill included). A ``requests.parquet`` is never replaced by one with fewer records.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest, RunStatus
from pddbench.harness.rundir.records import finalize_journal
from pddbench.harness.rundir.sends import count_sends


@click.command("finalize")
@click.argument("run_dir", type=click.Path(path_type=Path))
def finalize(run_dir: Path) -> None:
    """Finalise RUN_DIR's journal into requests.parquet (after a crash)."""
    paths = RunPaths(run_dir)
    if not paths.journal.is_file():
        raise UserError(f"{run_dir}: no journal.jsonl here (not a pddbench run folder?)")
    try:
        records, bad = finalize_journal(paths.journal, paths.requests)
        manifest = _manifest_or_fresh(paths)
        if manifest.status == RunStatus.RUNNING:
            manifest.status = RunStatus.RECOVERED
        manifest.records = records
        manifest.journal_unreadable_lines = bad
        if manifest.sent_requests is None:  # a killed run never wrote its count
            manifest.sent_requests = count_sends(paths.sends)
        manifest.save(paths.root)
    except OSError as exc:
        raise UserError(f"{run_dir}: cannot finalise: {exc.strerror or exc}") from None
    note = f" ({bad} unreadable journal line(s) skipped)" if bad else ""
    click.echo(f"{records} records -> {paths.requests}{note}")


def _manifest_or_fresh(paths: RunPaths) -> RunManifest:
    """The run's manifest; a missing, cut-off or malformed one starts afresh (the records
    are the result, the manifest only describes them)."""
    try:
        return RunManifest.load(paths.root)
    except UserError:
        return RunManifest(run_id=paths.run_id)
