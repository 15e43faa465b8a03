"""Runtime link changes: what may change, a schedule of changes, and the record of each.

A :class:`LinkChange` names the fields that change (rate, delay, jitter, loss, up/down);
a :class:`Schedule` lists changes at offsets from the start of a run (both are config
models, in ``topology_config``, where ``[network.schedule]`` expands into one); ``ScheduleRunner``
applies them on time in a background thread (absolute deadlines, no drift) through a
callback (``Topology.apply_change``), which returns a :class:`ChangeRecord` with the
moment the change took effect. Records go to ``changes_table`` for the run's results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pddbench.netem.topology_config import (
    ChangeDirection,
    LinkChange,
    Schedule,
    ScheduledChange,
)

__all__ = ["ChangeDirection", "ChangeRecord", "LinkChange", "Schedule", "ScheduledChange"]


@dataclass
class ChangeRecord:
    """One applied change: when it was due, when it took effect, what it set."""

    link: str
    direction: str
    changes: dict[str, Any]
    backend: str
    t_unix: float  # wall clock when the change had been applied
    t_mono: float  # time.monotonic() at the same moment
    at_s: float | None = None  # scheduled offset, if it came from a schedule
    lag_ms: float | None = None  # effect time minus scheduled time
    # the direction's state once the change took effect (configured, unscaled units)
    rate_mbit: float | None = None
    delay_ms: float | None = None
    jitter_ms: float | None = None
    loss_pct: float | None = None
    up: bool | None = None
    cross_traffic_mbit: float | None = None  # a cross-traffic flow's measured goodput

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["changes"] = ",".join(f"{k}={v}" for k, v in sorted(self.changes.items()))
        return row


ApplyFn = Callable[[str, LinkChange, ChangeDirection], list[ChangeRecord]]


class ScheduleRunner:
    """Applies a schedule relative to ``t0`` (monotonic) in a background thread."""

    def __init__(self, schedule: Schedule, apply: ApplyFn, t0: float | None = None) -> None:
        self.schedule = schedule
        self._apply = apply
        self.t0 = time.monotonic() if t0 is None else t0
        self.records: list[ChangeRecord] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="netem-schedule", daemon=True)

    def start(self) -> ScheduleRunner:
        self._thread.start()
        return self

    def _run(self) -> None:
        for event in self.schedule.ordered():
            due = self.t0 + event.at_s
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            try:
                for record in self._apply(event.link, event.changes, event.direction):
                    record.at_s = event.at_s
                    record.lag_ms = (record.t_mono - due) * 1000.0
                    self.records.append(record)
            except Exception as exc:  # recorded, the run goes on
                self.errors.append(f"at {event.at_s}s on {event.link}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


def changes_table(records: list[ChangeRecord]) -> Any:
    """The records as a pyarrow table (one row per applied change)."""
    import pyarrow as pa

    return pa.Table.from_pylist([r.to_row() for r in records])
