"""pddbench's locustfile: the worker side of a distributed replay, for ``locust --worker``.

Run a worker on any machine that can reach the master and the system under test::

    pddbench replay --engine locust --worker --master-host MASTER
    # or, with the plain Locust command:
    F=$(python -c 'import pddbench.harness.drive.locust.locustfile as m; print(m.__file__)')
    locust -f "$F" --worker --master-host MASTER

The worker needs no trace: its shard, the target URL and the replay options arrive from
the master (``pddbench replay --engine locust --master ...``). :class:`ReplayUser` is a
placeholder (one per worker) that makes the run visible in Locust's views; requests are
sent by the worker's shard driver on the SessionPlayer's schedule, not by user tasks.

Must not: act as a master (the pddbench master plans, shards and journals; a plain
``locust --master`` with this file is refused).
"""

from __future__ import annotations

from typing import Any

from locust import User, constant, events, task
from locust.runners import WorkerRunner

from pddbench.harness.drive.locust.worker_agent import WorkerAgent


class ReplayUser(User):
    """One per worker: Locust's handle on that worker's shard (idle by design)."""

    wait_time = constant(3600)

    @task
    def hold(self) -> None:
        """Nothing: the shard driver sends requests when the SessionPlayer says they are due."""


@events.init.add_listener
def _on_init(environment: Any, **_kw: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        WorkerAgent(environment)
    else:  # a plain `locust` master or local run: nothing here would send a request
        raise SystemExit(
            "pddbench's locustfile runs workers only; start the master with "
            "`pddbench replay --engine locust --master --trace T --target URL --workers N`"
        )
