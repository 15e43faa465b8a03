"""``pddbench engines install|make-tiny-model|where``: real engines in the engine cache.

Declarations only: the work is in :mod:`pddbench.harness.engines`. The cache is
``$PDDBENCH_ENGINE_CACHE`` (default ``~/.cache/pddbench/engines``); every command is
idempotent, so a second run is fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.harness.cli.options import path_option
from pddbench.harness.engines.cache import engine_cache_dir


@click.group("engines")
def engines() -> None:
    """Install real engines (vLLM CPU, llama.cpp) and the tiny model they serve."""


@engines.command("install")
@click.argument("names", nargs=-1, required=True, type=click.Choice(["vllm", "llamacpp"]))
@click.option("--force", is_flag=True, help="Reinstall even if the cache has it.")
@click.option("--jobs", type=int, default=None, help="llama.cpp: parallel compile jobs.")
def install_command(names: tuple[str, ...], force: bool, jobs: int | None) -> None:
    """Install engines into the cache (vLLM: its own venv; llama.cpp: built from source)."""
    from pddbench.harness.engines.install import install
    from pddbench.harness.engines.tiny_model import make_tiny_model

    def log(line: str) -> None:
        click.echo(f"pddbench: {line}", err=True)

    for name in names:
        kw: dict[str, object] = {"force": force, "log": log}
        if name == "llamacpp" and jobs:
            kw["jobs"] = jobs
        done = install(name, **kw)
        state = "installed" if done.fresh else "already installed"
        click.echo(f"{name} {done.version}: {state} ({done.seconds:.1f} s): {done.executable}")
    model, fresh = make_tiny_model()
    click.echo(f"tiny model: {'written' if fresh else 'present'}: {model.root}")


@engines.command("make-tiny-model")
@path_option(
    "--out",
    file_okay=False,
    help="Folder to write (default: the cache's models/tiny-llama-v<vocab>).",
)
@click.option(
    "--vocab-size",
    type=int,
    default=32000,
    show_default=True,
    help="Model vocabulary; must be >= the scenario's [client] vocab_size.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Rewrite even if the folder has this model.")
def make_tiny_model_command(out: Path | None, vocab_size: int, seed: int, force: bool) -> None:
    """Write a random 2-layer Llama: Hugging Face folder (hf/) and GGUF (tiny-llama.gguf)."""
    from pddbench.harness.engines.tiny_model import TinyModelSpec, make_tiny_model

    model, fresh = make_tiny_model(
        out, TinyModelSpec(vocab_size=vocab_size, seed=seed), force=force
    )
    click.echo(f"{'wrote' if fresh else 'already there'}: {model.hf_dir} and {model.gguf}")


@engines.command("where")
def where_command() -> None:
    """Print the engine cache and what it holds."""
    from pddbench.harness.engines.install import llama_server, vllm_python

    click.echo(f"cache: {engine_cache_dir()}")
    for name, path in (("vllm", vllm_python()), ("llamacpp", llama_server())):
        click.echo(f"{name}: {path if path.exists() else 'not installed'}")


@engines.command("greedy")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    required=True,
    help="A real-engine PD/PDD scenario (repeatable), e.g. vllm-cpu-pdd.",
)
@path_option("--trace", required=True, dir_okay=False, help="Trace whose first requests to send.")
@click.option("--requests", type=int, default=30, show_default=True)
@click.option(
    "--max-tokens",
    type=int,
    default=32,
    show_default=True,
    help="At most this many output tokens per request (the trace's length below it).",
)
@click.option("--no-emulation", is_flag=True, help="Loopback: no emulated WAN.")
@path_option(
    "--out",
    file_okay=False,
    default=Path("results"),
    show_default=True,
    help="Folder for the deployments' logs and greedy.json.",
)
@click.option(
    "--min-share",
    type=float,
    default=0.95,
    show_default=True,
    help="Exit 1 when a deployment's identical share is below this.",
)
def greedy_command(
    scenarios: tuple[str, ...],
    trace: Path,
    requests: int,
    max_tokens: int,
    no_emulation: bool,
    out: Path,
    min_share: float,
) -> None:
    """Greedy equivalence: each request through the deployment and alone on its P instance.

    Prints, per deployment, identical sequences / requests, by pipeline, and the first
    differing token of every other request (CPU kernels are not batch-invariant: a near-tie
    may flip a token; they are counted, not hidden)."""
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.harness.deploy.systems import emulation_problem
    from pddbench.harness.jobs.greedy import greedy_cases, run_greedy

    emulate = not no_emulation
    if emulate and (problem := emulation_problem()):
        raise click.ClickException(f"{problem} (or pass --no-emulation)")
    low = False
    for name in scenarios:
        scenario = load_scenario(name)
        cases = greedy_cases(
            trace, requests, max_tokens, scenario.client.vocab_size, scenario.client.first_token_id
        )
        click.echo(f"pddbench: deploying {scenario.name} ...", err=True)
        summary = run_greedy(scenario, cases, out, emulate=emulate)
        for line in summary.lines():
            click.echo(line)
        low |= summary.share < min_share
    if low:
        raise SystemExit(1)
