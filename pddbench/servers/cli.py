"""Command line of the reference servers: ``serve`` (mounted by the lead as ``pddbench serve``).

Owns turning options into a running :class:`~pddbench.servers.host.Host` of a whole
deployment on loopback, printing its front door URL, and exiting cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib

import click

from pddbench.errors import UserError
from pddbench.servers.config import builtin_deployments, load_deployment
from pddbench.servers.host import Host, run_loop, run_until_signal


@click.command("serve")
@click.option(
    "--scenario",
    "scenario",
    default="pdd",
    show_default=True,
    help="Built-in deployment (" + ", ".join(builtin_deployments()) + ") or a TOML/JSON file.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Move every port of the deployment so that the router listens on this one.",
)
@click.option("--quiet", is_flag=True, help="Print only the front door URL.")
def serve(scenario: str, port: int | None, quiet: bool) -> None:
    """Run a reference deployment (router + instances) until Ctrl-C."""
    dep = load_deployment(scenario)
    if port is not None:
        current = int(dep.router.bind.rpartition(":")[2])
        if current == 0:
            raise UserError("--port cannot move a deployment that uses port 0")
        dep = dep.shifted_ports(port - current)
    host = Host(dep)

    async def run() -> None:
        task = asyncio.create_task(run_until_signal(host, announce=not quiet))
        while host.front_door is None and not task.done():
            await asyncio.sleep(0.01)
        if host.front_door is not None:
            if quiet:
                click.echo(host.front_door)
            else:
                click.echo(f"{dep.name}: front door {host.front_door}  (Ctrl-C to stop)")
        await task

    with contextlib.suppress(KeyboardInterrupt):
        run_loop(run())


__all__ = ["serve"]
