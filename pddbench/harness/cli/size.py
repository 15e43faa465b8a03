"""``pddbench size``: each system's best deployment at an equal cost, on the twin.

Enumerates the deployments a scenario's template allows within ``--budget`` (instances ×
chips per role, chips that hold the weights), prunes them with the compute model's
bounds, walks the virtual-time twin's capacity ladder for the best ``--top`` and the
scenario's own deployment, and prints per system: deployment, cost, the model's bound,
the twin's capacity [interval], BCR, the binding resource, and the chosen one. Parses the
options and calls :func:`pddbench.harness.jobs.size_job.size_job`.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.harness.cli.options import run_settings, selection_options
from pddbench.harness.config.replay_text import build_options
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER, QUICK_LADDER


@click.command("size")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), required=True)
@click.option(
    "--scenario",
    "scenario_names",
    multiple=True,
    required=True,
    metavar="NAME|FILE",
    help="A reference scenario whose deployment is the template (repeatable).",
)
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Cost every candidate must stay within, in A-equivalents (default: the first "
    "scenario's own cost).",
)
@click.option(
    "--top",
    type=click.IntRange(1, 20),
    default=4,
    show_default=True,
    help="Candidates (best per structure by the model's bound per cost) measured on the twin.",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Walk each candidate at deployment seeds 0..N-1 (the servers' draws) and read it at "
    "the median seed: near capacity one seed's twin capacity moves by ~10-15 %.",
)
@click.option("--quick", is_flag=True, help="The quick ladder (150 requests a point).")
@click.option(
    "--out",
    "out_root",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
)
@click.option(
    "--link-model",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="The twin's calibrated link model (pddbench twin calibrate).",
)
@selection_options
def size(
    trace_path: Path,
    scenario_names: tuple[str, ...],
    budget: float | None,
    top: int,
    seeds: int,
    quick: bool,
    out_root: Path,
    link_model: Path | None,
    **kw: object,
) -> None:
    """Each system's best deployment at an equal cost, measured on the virtual-time twin."""
    from pddbench.harness.jobs.size_job import size_job

    size_job(
        trace_path=trace_path,
        scenario_names=list(scenario_names),
        options=build_options(**kw),  # type: ignore[arg-type]
        settings=QUICK_LADDER if quick else DEFAULT_LADDER,
        budget=budget,
        top=top,
        seeds=seeds,
        run_settings=run_settings(
            out_root, no_emulation=True, backend="virtual", link_model=link_model
        ),
    )
