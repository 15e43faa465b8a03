"""``pddbench netem``: bring an emulated network up or down, probe it, clean up after it.

The click group ``netem`` is mounted by the root CLI. Commands print human-readable text
and raise ``UserError`` for anything the user can fix; the network work is netem's
(``pddbench.netem.topology``, ``probe``, ``cleanup``); a scenario's network is read by
:mod:`pddbench.harness.cli.netem_network` (here because netem knows no scenarios).
"""

from __future__ import annotations

import os
import signal
import time

import click

from pddbench.errors import UserError
from pddbench.harness.cli.netem_network import load_network_config
from pddbench.netem import nsutil
from pddbench.netem.cleanup import cleanup
from pddbench.netem.plan import PREFIX
from pddbench.netem.probe import ProbeTolerance, check_probe, write_link_probes
from pddbench.netem.state import load_states
from pddbench.netem.topology import Terminated, Topology

_scenario = click.option(
    "--scenario",
    "scenario",
    required=True,
    help="Built-in scenario name (e.g. pdd) or TOML file: a scenario, or a bare [network].",
)
_run_id = click.option(
    "--run-id", default=None, help="1-6 lowercase letters/digits (default: random)."
)


@click.group(name="netem")
def netem() -> None:
    """Emulated WAN between datacenters: namespaces, shaped links, probes."""


def _print_topology(topo: Topology) -> None:
    click.echo(f"run {topo.run_id}  scale 1/{topo.plan.scale:g}")
    for host in topo.hosts().values():
        click.echo(f"  {host.kind:8} {host.name:24} {host.address:15} netns {host.netns}")
    report = topo.report()
    for key, backend in report.backends.items():
        click.echo(f"  link {key}: {backend}")
    for key, lead in report.lead_us.items():
        click.echo(f"  link {key}: delay stage latency {lead:.0f} µs, offset (measured)")
    for note in report.notes:
        click.echo(f"  note: {note}")


@netem.command()
@_scenario
@_run_id
def up(scenario: str, run_id: str | None) -> None:
    """Bring the network up and hold it until Ctrl-C / SIGTERM."""
    config = load_network_config(scenario, probe_scale=True)
    try:
        with Topology.up(config, run_id, label=scenario) as topo:
            _print_topology(topo)
            click.echo(
                f"up; `pddbench netem down {topo.run_id}` (or `--scenario {scenario}`)"
                " or Ctrl-C tears it down"
            )
            while True:
                signal.pause()
    except (KeyboardInterrupt, Terminated):  # the topology is already torn down here
        click.echo("torn down")


@netem.command()
@click.argument("run_id", required=False)
@click.option("--scenario", default=None, help="Stop every run brought up with this scenario.")
@click.option("--timeout", default=15.0, show_default=True, help="Seconds to wait for the owner.")
def down(run_id: str | None, scenario: str | None, timeout: float) -> None:
    """Stop run RUN_ID (or the runs of --scenario): ask the owner to tear down, clean up."""
    if (run_id is None) == (scenario is None):
        raise UserError("give a RUN_ID or --scenario NAME (see `pddbench netem status`)")
    nsutil.require_net_admin()
    states = load_states()
    if scenario is not None:
        ids = sorted({s.run_id for s in states if s.scenario == scenario})
        if not ids:
            raise UserError(f"no emulated network of scenario {scenario!r} is up")
    else:
        ids = [str(run_id)]
    for state in states:
        if state.run_id in ids and state.owner_alive():
            os.kill(state.owner_pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while state.owner_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
    for rid in ids:
        click.echo(f"run {rid}: {cleanup(rid).summary()}")


@netem.command()
def status() -> None:
    """List runs with their owner and namespaces, and namespaces no run owns."""
    states = load_states()
    owned: set[str] = set()
    for s in states:
        names = nsutil.list_netns(s.prefix)
        owned.update(names)
        alive = "alive" if s.owner_alive() else "DEAD (run `pddbench netem cleanup`)"
        click.echo(f"run {s.run_id}: owner pid {s.owner_pid} {alive}, {len(names)} namespaces")
    orphans = [n for n in nsutil.list_netns(PREFIX) if n not in owned]
    if orphans:
        click.echo(f"namespaces without a run: {', '.join(orphans)}")
    if not states and not orphans:
        click.echo("no emulated networks")


@netem.command()
@_scenario
@_run_id
@click.option("--samples", default=200, show_default=True, help="RTT samples per link.")
@click.option("--bulk-seconds", default=3.0, show_default=True, help="0 skips the goodput test.")
@click.option("--congestion", default=None, help="TCP congestion control for the bulk test.")
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write links.parquet.")
@click.option("--rtt-tolerance-ms", default=1.0, show_default=True)
@click.option("--p99-tolerance-ms", default=5.0, show_default=True)
@click.option("--goodput-fraction", default=0.9, show_default=True)
def probe(
    scenario: str,
    run_id: str | None,
    samples: int,
    bulk_seconds: float,
    congestion: str | None,
    out: str | None,
    rtt_tolerance_ms: float,
    p99_tolerance_ms: float,
    goodput_fraction: float,
) -> None:
    """Bring the network up, measure every link, compare with the scenario, tear down."""
    config = load_network_config(scenario, probe_scale=True)
    tolerance = ProbeTolerance(rtt_tolerance_ms, p99_tolerance_ms, goodput_fraction)
    with Topology.up(config, run_id, label=scenario) as topo:
        _print_topology(topo)
        probes = topo.probe(samples=samples, bulk_seconds=bulk_seconds, congestion=congestion)
    problems: list[str] = []
    for p in probes:
        good = " ".join(
            f"{d} {g:.1f}/{r:.1f} Mbit/s"
            for d, g, r in (
                ("a->b", p.goodput_a_to_b_mbit, p.rate_a_to_b_mbit),
                ("b->a", p.goodput_b_to_a_mbit, p.rate_b_to_a_mbit),
            )
            if g is not None and r is not None
        )
        click.echo(
            f"{p.link}: RTT p50 {p.rtt_p50_ms:.2f} (model {p.expected_rtt_p50_ms:.2f}) p99"
            f" {p.rtt_p99_ms:.2f} (model {p.expected_rtt_p99_ms:.2f}) ms, lost"
            f" {p.rtt_lost}/{p.rtt_samples + p.rtt_lost}; {good}"
        )
        problems += check_probe(p, tolerance)
    if out:
        write_link_probes(probes, out)
        click.echo(f"wrote {out}")
    if problems:
        raise UserError(
            f"{len(problems)} link check(s) failed: {problems[0]}", exit_code=1, details=problems
        )
    click.echo("all links within tolerance")


@netem.command(name="cleanup")
@click.argument("target", required=False)
@click.option("--all", "all_", is_flag=True, help="Also remove runs whose owner is alive.")
def cleanup_cmd(target: str | None, all_: bool) -> None:
    """Remove namespaces, processes and state of dead runs (or of TARGET run id / prefix)."""
    nsutil.require_net_admin()
    click.echo(cleanup(target, all=all_).summary())
