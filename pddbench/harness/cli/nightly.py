"""``pddbench nightly CONFIG --out DIR``: the command line of the nightly matrix.

Reads the configuration (:func:`~pddbench.harness.config.nightly.load_config`) and calls
:func:`~pddbench.harness.jobs.nightly.nightly_job`; the file format is described there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pddbench.harness.config.nightly import load_config
from pddbench.harness.jobs.nightly import nightly_job


@click.command("nightly")
@click.argument("config_path", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Tonight's folder, e.g. nightly/2026-11-30 (run folders land here).",
)
def nightly(config_path: Path, out_dir: Path) -> None:
    """Run the nightly matrix in CONFIG_PATH into --out."""
    code = nightly_job(load_config(config_path), config_path, out_dir, ["pddbench", *sys.argv[1:]])
    if code:
        raise click.exceptions.Exit(code)
