"""Distributed replay on Locust: a master and N workers drive the same SessionPlayer.

Layout (data flows top to bottom):

* ``launcher``  — harness side (no gevent): job folder, master/worker processes, finalising
  the run folder. :class:`LocustSettings` (``.drive``), :func:`run_locust_replay` and
  :func:`run_locust_worker` are the entry points the replay command calls.
* ``job``, ``protocol`` — what travels between processes (files, message shapes).
* ``sharding``, ``clock_sync``, ``cpu`` — pure decisions: which worker drives which task
  group, worker clock offsets, client CPU saturation. HTTP framing is
  :mod:`pddbench.harness.drive.framing`, shared with the asyncio engine.
* ``master``    — the Locust master process (gevent): clocks, shards, journal, liveness.
* ``locustfile``, ``worker_agent``, ``waker``, ``gclient``, ``ghttp`` — the worker process
  (gevent): shard driver, its precise wake-up, and the streaming HTTP client on a lean
  keep-alive pool.

Importing this package imports nothing from gevent or Locust: the gevent world stays in
its own processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pddbench.harness.drive.locust.launcher import (
        LocustSettings,
        run_locust_replay,
        run_locust_worker,
    )

__all__ = ["LocustSettings", "run_locust_replay", "run_locust_worker"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pddbench.harness.drive.locust import launcher

        return getattr(launcher, name)
    raise AttributeError(name)
