"""Garbage-collector policy of a server process: no full collection while requests run.

Owns how CPython's cyclic collector may interrupt the event loop. A server process holds a
large, long-lived heap (the radix trees of tens of instances: two GC-tracked objects per
cached block), and a full (generation-2) collection walks all of it: hundreds of
milliseconds on this machine, during which every instance's scheduler falls behind its
modelled time. Measured on the 43 A + 32 B perf cluster: 3-6 full collections per minute
per process, 0.1-0.3 s of CPU each, the main cause of scheduler lag above 5 ms.

The policy: after start-up, everything alive is frozen (never scanned again), young
generations are collected as usual (cheap, bounded by the allocation threshold), and the
automatic full collection is switched off. The servers create no cyclic garbage that
outlives a young collection (checked: a full collection after a minute of the perf load
finds ~50 objects, all from start-up), so nothing accumulates; still, a full collection
runs whenever the process has been idle (no request in flight) for a while, so a
long-running ``pddbench serve`` stays tidy between benchmark runs.

Process-wide: used by the process entry points only, never by in-process test hosts.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

# CPython 3.11 collects generation 2 when its counter passes this threshold *and* the
# pending long-lived objects exceed a quarter of the long-lived total; a huge threshold
# means "never automatically".
_NEVER = 1 << 30


class QuietGc:
    """Freeze start-up objects, no automatic full collections, full ones when idle."""

    def __init__(self, idle: Callable[[], bool], interval_s: float = 10.0) -> None:
        self.idle = idle
        self.interval_s = interval_s
        self.full_collections = 0
        self._saved: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._saved = gc.get_threshold()
        gc.collect()
        gc.freeze()
        young0, young1, _ = self._saved
        gc.set_threshold(young0, young1, _NEVER)
        self._task = asyncio.create_task(self._sweeper())

    async def _sweeper(self) -> None:
        was_idle = False
        worked = False  # requests ran since the last full collection
        while True:
            await asyncio.sleep(self.interval_s)
            now_idle = self.idle()
            worked = worked or not now_idle
            if now_idle and was_idle and worked:  # idle for a whole interval, once
                gc.collect()
                self.full_collections += 1
                worked = False
            was_idle = now_idle

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            gc.unfreeze()
            self._saved = None
