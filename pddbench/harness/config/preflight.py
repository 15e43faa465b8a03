"""The checks every run's inputs pass before anything happens: the trace is there and
readable for a replay, the output folder can hold run folders.

Each check reads the filesystem and raises a one-line :class:`UserError` saying what to
do; none writes, creates a folder, starts a process or touches a network namespace.
The entry points (replay, capacity, the main job, nightly) call them before the
emulation probe, a deployment or a run folder. Must not import the run half
(drive, deploy, plan): what a plan needs of the trace is checked where the plan is made.
"""

from __future__ import annotations

from pathlib import Path

from pddbench.errors import TraceError, UserError
from pddbench.workloads.traceio import Trace, read_trace


def load_trace(path: Path) -> Trace:
    """Read the trace for a replay; a missing file gets a hint on how to make one."""
    if not path.exists():
        raise UserError(
            f"trace {path} not found; make one with `pddbench trace synth --profile jan-feb "
            f"-o {path}` or import one with "
            f"`pddbench trace import FORMAT SRC -o {path}` (`pddbench trace import --help` "
            "lists the formats)"
        )
    try:
        return read_trace(path, for_replay=True)
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(f"{path}: cannot read trace ({type(exc).__name__}: {exc})") from None


def check_out_folder(out_root: str | Path) -> None:
    """Refuse an ``--out`` that names a file, or lies under one (read-only: the folder is
    created later, by the run, when missing)."""
    root = Path(out_root)
    if root.exists() and not root.is_dir():
        raise UserError(
            f"--out {out_root} is a file, not a folder: name a folder to hold the run "
            "folders (made when missing), e.g. --out results"
        )
    for parent in root.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(
                    f"--out {out_root}: {parent} is a file, so no folder can be made under "
                    "it; name a folder elsewhere, e.g. --out results"
                )
            return
