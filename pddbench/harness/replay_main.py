"""The body of ``pddbench replay``: trace → plan → (deploy →) replay → finalise → compare.

Kept apart from the click declarations so it can be called from tests and from other
commands (capacity search, nightly) with the same semantics.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import TraceError, UserError
from pddbench.harness.live import LiveView
from pddbench.harness.replay import ReplayOptions, ReplayPlan, prepare, run_replay
from pddbench.harness.rundir import RunPaths, base_manifest, file_digest, new_run
from pddbench.harness.summary import print_comparison
from pddbench.workloads.traceio import Trace, read_trace

EXIT_INTERRUPTED = 130


def load_trace(path: Path) -> Trace:
    """Read the trace; a missing file gets a hint on how to make one."""
    if not path.exists():
        raise UserError(
            f"trace {path} not found; make one with `pddbench trace synth --profile jan-feb "
            f"-o {path}` or import one with "
            f"`pddbench trace import mooncake|weka|azure SRC -o {path}`"
        )
    try:
        return read_trace(path)
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(f"{path}: cannot read trace ({type(exc).__name__}: {exc})") from None


def trace_manifest(trace: Trace, path: Path, plan: ReplayPlan) -> dict[str, object]:
    return {
        "path": str(path),
        "digest": file_digest(path),
        "requests": trace.num_requests,
        "epoch": trace.epoch,
        "source": trace.source,
        "replayed": plan.selection_note,
        "replayed_requests": len(plan.requests),
    }


def replay_main(
    *,
    trace_path: Path,
    scenarios: tuple[str, ...],
    target: str | None,
    out_root: Path,
    label: str | None,
    options: ReplayOptions,
    argv: list[str],
) -> int:
    """Run the replays; returns the exit status."""
    trace = load_trace(trace_path)
    plan = prepare(trace, options)
    if not plan.requests:
        raise UserError(
            "the selection keeps no request (check --window / --sample / --max-requests)"
        )
    click.echo(f"pddbench: replaying {plan.selection_note}", err=True)
    trace_info = trace_manifest(trace, trace_path, plan)
    runs: list[RunPaths] = []
    interrupted = False
    if target is not None:
        if scenarios:
            raise UserError("--target drives an existing endpoint: give no --scenario with it")
        paths = new_run(out_root, label or "target")
        manifest = base_manifest(argv=argv, run_id=paths.run_id)
        manifest["scenario"] = {
            "name": label or "target",
            "deployment": "external",
            "target": target,
            "emulation": None,
        }
        manifest["trace"] = trace_info
        outcome = run_replay(
            plan, options, target, paths, manifest, live=LiveView(label or "target")
        )
        runs.append(outcome.paths)
        interrupted = outcome.interrupted
    else:
        from pddbench.harness.deploy import replay_scenarios

        runs, interrupted = replay_scenarios(
            scenarios,
            plan=plan,
            options=options,
            out_root=out_root,
            label=label,
            argv=argv,
            trace_info=trace_info,
        )
    print_comparison(runs)
    return EXIT_INTERRUPTED if interrupted else 0
