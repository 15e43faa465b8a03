"""The ``pddbench`` command line: the root group, lazy sub-commands, error reporting.

Owns how the CLI is assembled and how failures reach the user: a :class:`UserError`
becomes ``pddbench: <message>`` (plus its detail lines) on stderr and its exit status; a
bad option or argument (click's usage errors) one such line and exit 2;
Ctrl-C exits 130; an unexpected exception prints one line (the traceback only with
``PDDBENCH_DEBUG=1``). Sub-commands live next to the code they drive and are imported
only when used, so ``pddbench --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from pddbench import __version__
from pddbench.errors import UserError


class LazyGroup(click.Group):
    """A click group whose sub-commands are ``"module:attribute"`` strings loaded on use."""

    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    lazy={
        "import": "pddbench.workloads.importers.cli:trace_import",
        "synth": "pddbench.workloads.synth_cli:synth",
        "inspect": "pddbench.workloads.inspect_cli:inspect",
        "validate": "pddbench.workloads.inspect_cli:validate",
    },
)
def trace() -> None:
    """Import, synthesise, validate and inspect traces (canonical parquet)."""


@click.group(
    cls=LazyGroup,
    lazy={
        "netem": "pddbench.harness.cli.netem:netem",
        "serve": "pddbench.servers.cli:serve",
        "replay": "pddbench.harness.cli.replay:replay",
        "finalize": "pddbench.harness.cli.finalize:finalize",
        "scenario": "pddbench.harness.cli.scenario:scenario",
        "report": "pddbench.harness.cli.report:report_command",
        "capacity": "pddbench.harness.cli.capacity:capacity",
        "size": "pddbench.harness.cli.size:size",
        "nightly": "pddbench.harness.cli.nightly:nightly",
        "engines": "pddbench.harness.cli.engines:engines",
        "regress": "pddbench.harness.cli.report:regress_command",
        "experiment": "pddbench.harness.cli.experiment:experiment",
        "twin": "pddbench.twin.cli:twin",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="pddbench")
def cli() -> None:
    """pddbench: replay agentic LLM traces against PDD and its baselines over an emulated WAN."""


cli.add_command(trace)


def _report(exc: UserError) -> int:
    click.echo(f"pddbench: {exc}", err=True)
    for line in exc.details:
        if not str(exc).endswith(line):  # the first problem is already the message
            click.echo(line, err=True)
    return exc.exit_code


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns (and exits with) the process status."""
    try:
        # without standalone mode click returns the status of click.exceptions.Exit
        result = cli.main(args=argv, prog_name="pddbench", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except UserError as exc:
        code = _report(exc)
    except click.exceptions.Abort:
        click.echo("pddbench: interrupted", err=True)
        code = 130
    except KeyboardInterrupt:
        click.echo("pddbench: interrupted", err=True)
        code = 130
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.UsageError as exc:  # a bad option or argument: one line, like UserError
        where = exc.ctx.command_path if exc.ctx is not None else "pddbench"
        click.echo(f"pddbench: {exc.format_message()} (see `{where} --help`)", err=True)
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except BrokenPipeError:
        code = 0
    except Exception as exc:
        if os.environ.get("PDDBENCH_DEBUG"):
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        click.echo(
            f"pddbench: internal error: {type(exc).__name__}: {first} "
            "(set PDDBENCH_DEBUG=1 for the traceback)",
            err=True,
        )
        code = 1
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
