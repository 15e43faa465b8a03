"""``pddbench twin``: the virtual-time twin's own commands (``calibrate``).

Owns the click group and its options; the measuring is
:mod:`pddbench.twin.calibrate_measure`'s, the fit and the file
:mod:`pddbench.twin.calibrate`'s. Prints human-readable lines; raises ``UserError`` for
what the user can fix (no root: exit 2, one line).
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
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
    caps = model.flow_caps()
    for d in model.directions:
        click.echo(
            f"{d.link} {d.direction}: delay {d.delay_ms:.2f} ms (configured"
            f" {d.configured_delay_ms:g}), jitter {d.jitter_ms:.2f} ms, rate {d.rate_mbit:.0f}"
            f" Mbit/s from {d.rate_source} (configured {d.configured_rate_mbit})"
            + (
                f"; one {model.measured.congestion} KV connection {d.flow_rate_mbit:.0f} Mbit/s"
                " (each flow's cap)"
                if (d.link, d.direction) in caps
                else ""
            )
        )
    click.echo(f"wrote {path}")


@twin.command(name="fit-host")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@path_option("--trace", help="The trace the emulated run replayed.", required=True)
@path_option(
    "--link-model",
    help="The link-model file (pddbench twin calibrate) to write the host costs into; a new "
    "file holding only them (no fitted links) when it does not exist.",
    dir_okay=False,
    required=True,
)
@click.option("--scenario", default=None, help="The run's scenario (default: its manifest's).")
@click.option("--rounds", default=3, show_default=True, help="Twin re-runs of the fit.")
def fit_host(
    run_dir: Path, trace: Path, link_model: Path, scenario: str | None, rounds: int
) -> None:
    """Fit the emulated deployment's host costs per hop (the Python servers' own work on
    this host: parsing, hashing, HTTP chunks, landing KV) from RUN_DIR, an emulated
    'pddbench replay' run, against the twin replaying the same plan; written into the
    link-model file, whose host costs --backend virtual --link-model FILE then adds."""
    from pddbench.harness.config.preflight import load_trace
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.twin.calibrate import load_link_model
    from pddbench.twin.host import HOPS
    from pddbench.twin.host_fit import fit_run, host_only_file

    sc = load_scenario(scenario) if scenario else None
    if link_model.exists():
        model = load_link_model(link_model).model
    else:
        model = host_only_file(run_dir, sc)
    rounds_done = fit_run(run_dir, load_trace(trace), scenario=sc, link_model=model, rounds=rounds)
    head = "".join(f" {'round ' + str(i):>16}" for i in range(len(rounds_done)))
    click.echo(f"{'hop':14} {'part':13}{head}")
    for j, hop in enumerate(HOPS):
        cells = "".join(
            f" {r.costs.model_dump()[hop] * 1e3:7.2f}{r.residuals[j].median_s * 1e3:+8.2f}"
            for r in rounds_done
        )
        click.echo(f"{hop:14} {HOPS[hop]:13}{cells}")
    click.echo("(each round: the cost the twin ran with, ms, and the median residual left, ms)")
    fitted = rounds_done[-1].costs
    link_model.parent.mkdir(parents=True, exist_ok=True)
    model.model_copy(update={"host": fitted}).save(link_model)
    click.echo(
        f"host costs {fitted.total_s * 1e3:.1f} ms per request over {fitted.requests} paired "
        f"requests; wrote {link_model}"
    )


@twin.command(name="fit-windows")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@path_option(
    "--link-model",
    help="The calibrated link-model file (pddbench twin calibrate) to write the rates into.",
    dir_okay=False,
    required=True,
)
@click.option("--scenario", default=None, help="The run's scenario (default: its manifest's).")
def fit_windows(run_dir: Path, link_model: Path, scenario: str | None) -> None:
    """Fit what one of the deployment's warm KV connections carries per WAN direction from
    RUN_DIR, an emulated replay with WAN transfers (the median of its large transfers'
    modelled bytes over their active time), into the link-model file: the twin caps each
    KV flow at it (the servers' connections keep the window slow start left them)."""
    import pandas as pd

    from pddbench.harness.config.scenario import load_scenario
    from pddbench.twin.backend import twin_config
    from pddbench.twin.calibrate import load_link_model
    from pddbench.twin.host_fit import emulated_manifest
    from pddbench.twin.window_fit import fit_flow_rates, flow_samples

    manifest = emulated_manifest(run_dir)
    sc = load_scenario(scenario or manifest.scenario_name)
    dep, net = twin_config(sc)
    if net is None or not net.links:
        raise UserError(f"{sc.name} has no WAN: nothing to fit")
    source = load_link_model(link_model)
    timings = pd.read_parquet(run_dir / "requests.parquet", columns=["server_timing"])
    samples = flow_samples(timings["server_timing"], dep, net)
    fitted = fit_flow_rates(samples)
    if not fitted:
        raise UserError(f"{run_dir}: no WAN KV transfer large enough to measure a connection")
    missing = set(fitted) - {(d.link, d.direction) for d in source.model.directions}
    if missing:
        raise UserError(
            f"{link_model} has no calibrated {sorted(missing)}: run pddbench twin calibrate first"
        )
    directions = []
    for d in source.model.directions:
        got = fitted.get((d.link, d.direction))
        if got is None:
            directions.append(d)
            continue
        rate, n = got
        click.echo(
            f"{d.link} {d.direction}: one connection {rate:.0f} Mbit/s (median of {n} transfers;"
            f" the calibration's {d.flow_rate_mbit or d.rate_mbit:.0f}, the line {d.rate_mbit:.0f})"
        )
        directions.append(
            d.model_copy(
                update={
                    "flow_rate_mbit": rate,
                    "flow_rate_source": f"{run_dir.name} ({sc.name})",
                    "flow_samples": n,
                }
            )
        )
    source.model.model_copy(update={"directions": directions}).save(link_model)
    click.echo(f"wrote {link_model}")
