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
