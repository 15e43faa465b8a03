"""``pddbench scenario list|show|validate``: the built-in scenarios and user scenario files."""

from __future__ import annotations

import json

import click

from pddbench.harness.config.scenario import builtin_scenarios, load_scenario, scenario_text


@click.group("scenario")
def scenario() -> None:
    """List, show and validate scenarios."""


@scenario.command("list")
def list_scenarios() -> None:
    """The built-in scenarios with one line each."""
    items = builtin_scenarios()
    width = max(map(len, items), default=0)
    for name, description in items.items():
        click.echo(f"{name.ljust(width)}  {description}")


@scenario.command("show")
@click.argument("name_or_file")
@click.option("--json", "as_json", is_flag=True, help="The validated tree as JSON.")
def show(name_or_file: str, as_json: bool) -> None:
    """Print a scenario (TOML as written, or the validated tree with --json)."""
    if as_json:
        click.echo(json.dumps(load_scenario(name_or_file).manifest(), indent=2))
    else:
        click.echo(scenario_text(name_or_file)[0], nl=False)


@scenario.command("validate")
@click.argument("names_or_files", nargs=-1, required=True)
def validate(names_or_files: tuple[str, ...]) -> None:
    """Validate scenarios (exit 2 with one line per problem if any is invalid)."""
    for item in names_or_files:
        s = load_scenario(item)
        kind = "reference servers" if s.is_reference else f"{len(s.engines)} engine(s)"
        net = "emulated network" if s.network is not None else "loopback"
        click.echo(f"ok: {item}: {kind}, {len(s.instance_sites())} instances, {net}")
