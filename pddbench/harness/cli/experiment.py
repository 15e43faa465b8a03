"""``pddbench experiment list | run | report``: the declared PDD experiments.

Thin click layer over :mod:`pddbench.harness.experiments`.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.cli.options import path_option


@click.group("experiment")
def experiment() -> None:
    """Reproduce the PDD report's experiments E1–E12 (published vs measured)."""


@experiment.command("list")
def list_command() -> None:
    """Each experiment with its published figure, scenarios and declared cost."""
    from pddbench.harness.experiments.catalog import EXPERIMENTS, REPLAY_COST, total_cost

    for e in EXPERIMENTS:
        runnable = "runnable" if e.run is not None else f"not runnable: {e.not_run_reason}"
        click.echo(f"{e.id:>3}  {e.title}")
        click.echo(f"     expected : {e.expected}")
        click.echo(f"     published: {e.published}")
        click.echo(f"     check    : {e.check_text}")
        click.echo(
            f"     scenarios: {', '.join(e.scenarios) or '—'}; cost quick "
            f"{e.cost.quick_s:g} s / full {e.cost.full_s:g} s"
            f"{f' + {len(e.scenarios)} replays' if e.replayed else ''}; {runnable}"
        )
    q, f = total_cost(list(EXPERIMENTS), True), total_cost(list(EXPERIMENTS), False)
    later = sum(e.cost.full_s for e in EXPERIMENTS if e.run is None)
    click.echo(
        f"all: declared {q / 60:.0f} min quick, {f / 3600:.1f} h full (each scenario replayed "
        f"once, {REPLAY_COST.quick_s:g} s quick / {REPLAY_COST.full_s:g} s full, shared); "
        f"the experiments not runnable here would add {later / 3600:.1f} h full"
    )


@experiment.command("run")
@click.argument("names", nargs=-1, required=True)
@path_option(
    "--out", required=True, help="Folder for the experiments' measurements, runs and report."
)
@click.option("--quick", is_flag=True, help="The short version of each experiment.")
@click.option(
    "--emulate",
    is_flag=True,
    help="Replay with the emulated WAN (needs network namespaces); default: "
    "--no-emulation, and WAN-dependent verdicts say so.",
)
@path_option(
    "--trace",
    dir_okay=False,
    help="Your trace for the trace and replay experiments (default: jan-feb for "
    "E1/E3, the smoke profile for replays).",
)
def run_command(
    names: tuple[str, ...], out: Path, quick: bool, emulate: bool, trace: Path | None
) -> None:
    """Run experiments NAMES (E1 .. E12, or all) into OUT and write the report."""
    from pddbench.harness.experiments.catalog import select, total_cost
    from pddbench.harness.experiments.report import write_reports
    from pddbench.harness.experiments.runner import replayed_scenarios, run_experiments

    if trace is not None and not trace.exists():
        raise UserError(f"--trace {trace}: no such file")
    exps = select(names)
    declared = total_cost(exps, quick, replayed_scenarios(out))
    click.echo(
        f"{len(exps)} experiment(s), declared {declared / 60:.1f} min "
        f"({'quick' if quick else 'full'}); out {out}"
    )
    run_experiments(exps, out, quick=quick, emulate=emulate, trace=trace, echo=click.echo)
    for path in write_reports(out):
        click.echo(f"wrote {path}")


@experiment.command("report")
@click.argument("out", type=click.Path(path_type=Path, file_okay=False, exists=True))
def report_command(out: Path) -> None:
    """Rewrite OUT's report (html, md, json) from its measurements and run folders."""
    from pddbench.harness.experiments.report import write_reports

    for path in write_reports(out):
        click.echo(f"wrote {path}")
