"""Host process: runs a set of instances of one deployment on one asyncio loop.

Owns starting and stopping instances (workers and/or the router) on their addresses, the
process's clock anchor and loop-lag probe, and the process entry point::

    python -m pddbench.servers.host --config CONFIG.json [--realtime PRIO]

``CONFIG.json`` is either a deployment (see :mod:`~pddbench.servers.config`) — every
instance is hosted — or ``{"deployment": {...}, "serve": ["p0", "md1", ...]}`` to host only
the named instances (one such process per network namespace; peers are found by the
addresses in the deployment). The process prints one ``instance <id> <role> http://<addr>``
line per instance, then ``ready``, and runs until SIGINT or SIGTERM, then exits cleanly
(status 0). Bad configuration exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pddbench.aioloop import loop_runner
from pddbench.errors import UserError
from pddbench.servers.clock import ClockAnchor, LoopLagMonitor
from pddbench.servers.config import DeploymentConfig, Role, parse_deployment
from pddbench.servers.gcpolicy import QuietGc
from pddbench.servers.instance import ProcessContext, WorkerInstance
from pddbench.servers.router import Router

T = TypeVar("T")


class Host:
    """Some or all instances of a deployment, in this process."""

    def __init__(self, dep: DeploymentConfig, serve: list[str] | None = None) -> None:
        names = {i.id for i in dep.instances}
        if serve is not None and (unknown := sorted(set(serve) - names)):
            raise UserError(f"serve lists unknown instances: {', '.join(unknown)}")
        self.dep = dep
        self.serve = set(serve) if serve is not None else names
        if self.serve != names and any(i.bind.endswith(":0") for i in dep.instances):
            raise UserError("port 0 is only allowed when one process hosts the whole deployment")
        self.proc = ProcessContext(ClockAnchor.take(), LoopLagMonitor())
        self.workers: list[WorkerInstance] = []
        self.router: Router | None = None
        self.addresses: dict[str, str] = {}

    async def start(self) -> dict[str, str]:
        self.proc.loop_lag.start()
        try:
            for inst in self.dep.instances:
                if inst.id in self.serve and inst.role is not Role.ROUTER:
                    w = WorkerInstance(inst, self.dep, self.proc)
                    self.workers.append(w)
                    self.addresses[inst.id] = await w.start()
            if self.dep.router.id in self.serve:
                dep = self.dep.with_addresses(
                    {k: v for k, v in self.addresses.items() if v != self.dep.instance(k).address}
                )
                router = Router(dep, self.proc)
                self.addresses[self.dep.router.id] = await router.start()
                self.router = router  # the front door exists once it can route
        except OSError as exc:
            await self.stop()
            raise UserError(f"cannot listen: {exc.strerror or exc}") from None
        return self.addresses

    def idle(self) -> bool:
        """No request in flight on any hosted instance or router."""
        if self.router is not None and self.router.flows:
            return False
        return not any(w.jobs for w in self.workers)

    @property
    def front_door(self) -> str | None:
        return None if self.router is None else f"http://{self.router.address}"

    async def stop(self) -> None:
        if self.router is not None:
            await self.router.stop()
        for w in self.workers:
            await w.stop()
        self.proc.loop_lag.stop()


async def run_until_signal(host: Host, announce: bool = True) -> None:
    """Process entry: start ``host``, announce it, serve until SIGINT/SIGTERM.

    Owns the process, so it also sets the process's GC policy (:mod:`.gcpolicy`).
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    addresses = await host.start()
    quiet_gc = QuietGc(host.idle)
    quiet_gc.start()
    if announce:
        for inst in host.dep.instances:
            if inst.id in addresses:
                print(
                    f"instance {inst.id} {inst.role.value} http://{addresses[inst.id]}", flush=True
                )
        print("ready", flush=True)
    try:
        await stop.wait()
    finally:
        quiet_gc.stop()
        await host.stop()


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed (faster sockets and timers), else asyncio.

    ``PDDBENCH_UVLOOP=0`` forces the standard loop.
    """
    runner, _ = loop_runner(os.environ.get("PDDBENCH_UVLOOP", "1") != "0")
    return runner(coro)


def load_host_config(path: Path) -> tuple[DeploymentConfig, list[str] | None]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read host config: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: host config must be a JSON object")
    serve = None
    if "deployment" in data:
        serve = data.get("serve")
        if serve is not None and not (
            isinstance(serve, list) and all(isinstance(s, str) for s in serve)
        ):
            raise UserError(f"{path}: serve must be a list of instance ids")
        data = data["deployment"]
    return parse_deployment(data, str(path)), serve


def set_realtime(priority: int) -> str | None:
    """Run this process under SCHED_FIFO ``priority`` (1-99); None, or why it could not.

    For processes hosting worker instances on a machine shared with the router and the
    load generator: their timers must fire on time (modelled GPU time), and under the
    default policy they wait in the run queue behind CPU-bound neighbours (measured on the
    2-core perf cluster: A and B hosts waited 15-19 s for a CPU over a 45 s run, scheduler
    lag p99 20-50 ms; with SCHED_FIFO 0.1 s and <= 2 ms). They sleep most of the time, so
    they take little from the others; the kernel's RT throttling bounds the rest.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as exc:  # AttributeError: no SCHED_FIFO on this OS
        return f"cannot use SCHED_FIFO {priority}: {exc}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pddbench.servers.host", description=__doc__)
    ap.add_argument("--config", required=True, type=Path, help="host config JSON")
    ap.add_argument(
        "--realtime",
        type=int,
        default=None,
        metavar="PRIO",
        help="run under SCHED_FIFO PRIO (1-99): worker hosts on a busy machine (needs root)",
    )
    args = ap.parse_args(argv)
    if args.realtime is not None and not 1 <= args.realtime <= 99:
        print("pddbench-host: --realtime must be between 1 and 99", file=sys.stderr)
        return 2
    try:
        dep, serve = load_host_config(args.config)
        if args.realtime is not None and (why := set_realtime(args.realtime)):
            print(f"pddbench-host: warning: {why}; running at normal priority", file=sys.stderr)
        run_loop(run_until_signal(Host(dep, serve)))
    except UserError as exc:
        print(f"pddbench-host: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
