"""``pddbench trace import``: convert public traces to canonical trace files.

A click group ``trace_import`` (command name ``import``) with one sub-command per format.
Each runs its importer, writes the result with ``traceio.write_trace`` (source record and
epoch in the file metadata), prints warnings to stderr and one summary line to stdout.
Malformed input surfaces as :class:`~pddbench.errors.TraceError` (one line), which the
root ``pddbench`` command turns into its error message and exit status.
"""

from __future__ import annotations

from pathlib import Path

import click
import pyarrow as pa

from pddbench.errors import UserError
from pddbench.workloads.importers.azure import AZURE_BLOCK_SIZE, import_azure
from pddbench.workloads.importers.bailian import import_bailian
from pddbench.workloads.importers.burstgpt import (
    BURSTGPT_BLOCK_SIZE,
    FAILED_POLICIES,
    PREFIX_MODELS,
    import_burstgpt,
)
from pddbench.workloads.importers.common import ImportResult
from pddbench.workloads.importers.dynamo import import_dynamo
from pddbench.workloads.importers.mooncake import import_mooncake
from pddbench.workloads.importers.otel import OTEL_BLOCK_SIZE, import_otel
from pddbench.workloads.importers.tracelab import TRACELAB_BLOCK_SIZE, import_tracelab
from pddbench.workloads.importers.weka import SESSION_STARTS, import_weka
from pddbench.workloads.traceio import write_trace

_PATH = click.Path(path_type=Path, dir_okay=True, file_okay=True)
_OUTPUT = click.option(
    "-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
    help="Canonical trace file to write (parquet).",
)


def _write(result: ImportResult, output: Path) -> None:
    try:
        path = write_trace(result.table, output, source=result.source, epoch=result.epoch)
    except (OSError, pa.ArrowException) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"-o {output}: cannot write the trace: {why}") from None
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(
        f"{result.num_requests} requests, {result.num_sessions} sessions -> {path}"
    )


@click.group("import")
def trace_import() -> None:
    """Convert a public trace (Mooncake, WEKA, Azure, Bailian, BurstGPT, TraceLab, Dynamo,
    OpenTelemetry GenAI spans) to a canonical trace file."""


@trace_import.command("mooncake")
@click.argument("src", type=_PATH)
@_OUTPUT
@click.option(
    "--min-match-blocks", type=int, default=2, show_default=True,
    help="Fewest full blocks a request must share with an earlier one to continue it "
    "(block 0 is a system prompt shared by every request).",
)
def mooncake_command(src: Path, output: Path, min_match_blocks: int) -> None:
    """Mooncake JSONL (512-token block hashes); sessions are rebuilt from prefixes."""
    _write(import_mooncake(src, min_match_blocks=min_match_blocks), output)


@trace_import.command("weka")
@click.argument("src", type=_PATH)
@_OUTPUT
@click.option(
    "--block-size", type=int, default=None,
    help="Re-block to this many tokens per block, a multiple of the file's (64). "
    "[default: the file's]",
)
@click.option(
    "--session-gap", "session_gap_s", type=float, default=60.0, show_default=True,
    help="Mean (poisson) or exact (fixed) seconds between conversation starts.",
)
@click.option(
    "--session-start", type=click.Choice(SESSION_STARTS), default="poisson", show_default=True,
    help="How conversation start times are drawn.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for poisson starts.")
def weka_command(
    src: Path,
    output: Path,
    block_size: int | None,
    session_gap_s: float,
    session_start: str,
    seed: int,
) -> None:
    """WEKA agentic JSON: a trace_*.json file or a directory of them."""
    result = import_weka(
        src,
        block_size=block_size,
        session_gap_s=session_gap_s,
        session_start=session_start,  # type: ignore[arg-type]
        seed=seed,
    )
    _write(result, output)


@trace_import.command("azure")
@click.argument("src", type=_PATH)
@_OUTPUT
@click.option(
    "--block-size", type=int, default=AZURE_BLOCK_SIZE, show_default=True,
    help="Tokens per block of the (never shared) block hashes.",
)
def azure_command(src: Path, output: Path, block_size: int) -> None:
    """Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens)."""
    _write(import_azure(src, block_size=block_size), output)


def _block_size(default: int, what: str):  # type: ignore[no-untyped-def]
    return click.option(
        "--block-size", type=int, default=default, show_default=True,
        help=f"Tokens per block of the rebuilt prefix hashes ({what}).",
    )


@trace_import.command("bailian")
@click.argument("src", type=_PATH)
@_OUTPUT
def bailian_command(src: Path, output: Path) -> None:
    """Alibaba Bailian (Qwen) JSONL: sessions from parent_chat_id, 16-token block hashes."""
    _write(import_bailian(src), output)


@trace_import.command("burstgpt")
@click.argument("src", type=_PATH)
@_OUTPUT
@_block_size(BURSTGPT_BLOCK_SIZE, "the format has none")
@click.option(
    "--failed", type=click.Choice(FAILED_POLICIES), default="drop", show_default=True,
    help="Rows with Response tokens 0: drop them (counted) or keep them as 1-token requests.",
)
@click.option(
    "--prefix", type=click.Choice(PREFIX_MODELS), default="history", show_default=True,
    help="Synthetic prefix model: a v2 session turn re-sends the previous prompt, or none.",
)
def burstgpt_command(
    src: Path, output: Path, block_size: int, failed: str, prefix: str
) -> None:
    """BurstGPT CSV, v1 or v2 (Session ID, Elapsed time): v2 sessions are kept."""
    result = import_burstgpt(
        src, block_size=block_size, failed=failed, prefix=prefix,  # type: ignore[arg-type]
    )
    _write(result, output)


@trace_import.command("tracelab")
@click.argument("src", type=_PATH)
@_OUTPUT
@_block_size(TRACELAB_BLOCK_SIZE, "built from prefix_tokens")
def tracelab_command(src: Path, output: Path, block_size: int) -> None:
    """TraceLab JSONL(.gz), one row per LLM round; think times from the timing events."""
    _write(import_tracelab(src, block_size=block_size), output)


@trace_import.command("dynamo")
@click.argument("src", type=_PATH)
@_OUTPUT
def dynamo_command(src: Path, output: Path) -> None:
    """Dynamo request traces (dynamo.request.trace.v1, JSONL or JSONL.GZ)."""
    _write(import_dynamo(src), output)


@trace_import.command("otel")
@click.argument("src", type=_PATH)
@_OUTPUT
@_block_size(OTEL_BLOCK_SIZE, "from cached-token counts or the history model")
def otel_command(src: Path, output: Path, block_size: int) -> None:
    """OpenTelemetry GenAI spans (OTLP JSON): one trace is one session."""
    _write(import_otel(src, block_size=block_size), output)
