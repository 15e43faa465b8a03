"""The custom Locust messages between the pddbench master and its workers (names and shapes).

Master → worker:
  ``pdd_ping``   {seq, t1, w1}: clock exchange (echoed back with the worker's readings).
  ``pdd_shard``  {part, parts, data: Arrow IPC bytes, spec (part 0 only)}: the worker's
                 task groups with their prompt inputs, plus base URL and replay options.
  ``pdd_go``     {origin_master, offset}: start the shard; ``origin_master`` is the run's
                 start on the master's monotonic clock, ``offset`` the worker − master
                 estimate, so the worker's run clock starts at ``origin_master + offset``.
  ``pdd_stop``   {}: cancel in-flight requests, ship everything, report done.

Worker → master:
  ``pdd_pong``   {seq, t1, w1, t2, t3, w}: the ping with worker monotonic/wall readings.
  ``pdd_ready``  {requests, fields, pid, host, version}: shard received and prepared.
  ``pdd_batch``  {rows, cpu, sent, done, errors, in_flight}: finished requests (rows in
                 :data:`~pddbench.harness.drive.locust.job.RECORD_FIELDS` order, times on
                 the worker's run clock) and CPU fractions of the last intervals.
  ``pdd_done``   {records, cancelled, sent, stopped_at_s, cpu_s, wall_s}: every record
                 shipped (``records`` in total); ``cancelled`` when the shard was cut short
                 (stop, or the worker quitting); ``stopped_at_s`` when the duration cap
                 stopped new sends (worker run clock); the process CPU and wall seconds
                 spent driving the shard.
  ``pdd_error``  {message}: the worker cannot drive its shard.
"""

from __future__ import annotations

PING = "pdd_ping"
SHARD = "pdd_shard"
GO = "pdd_go"
STOP = "pdd_stop"

PONG = "pdd_pong"
READY = "pdd_ready"
BATCH = "pdd_batch"
DONE = "pdd_done"
ERROR = "pdd_error"

REPLAY_USER = "ReplayUser"  # the placeholder Locust user class (one per worker)
