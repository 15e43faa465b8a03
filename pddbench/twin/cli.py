"""``pddbench twin``: the virtual-time twin's own commands (``calibrate``).

Owns the click group and its options; the measuring is
:mod:`pddbench.twin.calibrate_measure`'s, the fit and the file
:mod:`pddbench.twin.calibrate`'s. Prints human-readable lines; raises ``UserError`` for
what the user can fix (no root: exit 2, one line).
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.harness.cli.options import path_option


@click.group(name="twin")
def twin() -> None:
    """The virtual-time twin of the reference deployments (``--backend virtual``)."""


@twin.command()
@click.option("--scenario", required=True, help="Built-in scenario name (e.g. pdd) or TOML file.")
@path_option("--trace", help="Trace whose prompt lengths give the KV transfer sizes to time.")
@path_option(
    "--out",
    help="The link-model file to write (default: results/link-model-SCENARIO.json).",
    dir_okay=False,
)
@click.option("--repeats", default=3, show_default=True, help="Transfers per size and direction.")
@click.option("--samples", default=200, show_default=True, help="RTT samples per link.")
@click.option("--bulk-seconds", default=2.0, show_default=True, help="Each goodput flow's length.")
def calibrate(
    scenario: str,
    trace: Path | None,
    out: Path | None,
    repeats: int,
    samples: int,
    bulk_seconds: float,
) -> None:
    """Fit the twin's link model to this machine's emulated WAN (root): per WAN direction
    the RTT, jitter and bulk TCP throughput of the trace's KV transfer sizes, written as a
    file that 'replay' / 'capacity --backend virtual --link-model FILE' load."""
    from pddbench.harness.cli.netem_network import load_network_config
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.netem import nsutil
    from pddbench.servers.config import Role
    from pddbench.twin.calibrate import transfer_sizes_tokens
    from pddbench.twin.calibrate_measure import calibrate as measure

    nsutil.require_net_admin()  # before anything slow: no root, exit 2 with one line
    sc = load_scenario(scenario)
    dep = sc.deployment_config
    workers = [i for i in dep.instances if i.role is not Role.ROUTER]
    kvb = dep.machine(workers[0]).model.kv_bytes_per_token
    lengths: list[int] = []
    if trace is not None:
        from pddbench.harness.config.preflight import load_trace
        from pddbench.workloads.schema import Col

        table = load_trace(trace).table
        lengths = table.column(Col.INPUT_LENGTH).to_pylist()
    sizes = transfer_sizes_tokens(lengths)
    net = load_network_config(scenario, probe_scale=True)
    click.echo(f"calibrating {sc.name}: KV sizes {sizes} tokens x {kvb} B, scale 1/{net.scale:g}")
    model = measure(
        net,
        sc.name,
        kvb,
        sizes,
        repeats=repeats,
        samples=samples,
        bulk_seconds=bulk_seconds,
        echo=click.echo,
    )
    path = out or Path("results") / f"link-model-{sc.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save(path)
    for d in model.directions:
        click.echo(
            f"{d.link} {d.direction}: delay {d.delay_ms:.2f} ms (configured"
            f" {d.configured_delay_ms:g}), jitter {d.jitter_ms:.2f} ms, rate {d.rate_mbit:.0f}"
            f" Mbit/s from {d.rate_source} (configured {d.configured_rate_mbit})"
        )
    click.echo(f"wrote {path}")
