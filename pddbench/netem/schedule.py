"""Runtime link changes: what may change, a schedule of changes, and the record of each.

A :class:`LinkChange` names the fields that change (rate, delay, jitter, loss, up/down);
a :class:`Schedule` lists changes at offsets from the start of a run; ``ScheduleRunner``
applies them on time in a background thread (absolute deadlines, no drift) through a
callback (``Topology.apply_change``), which returns a :class:`ChangeRecord` with the
moment the change took effect. Records go to ``changes_table`` for the run's results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pddbench.netem.topology_config import JitterDist

ChangeDirection = Literal["both", "a_to_b", "b_to_a"]


class LinkChange(BaseModel):
    """Fields to change on a link direction; unset fields keep their current value.

    Rates are configured (unscaled) values; the topology's scale factor applies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_mbit: float | None = Field(default=None, gt=0)
    delay_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_ms: float | None = Field(default=None, ge=0, le=10_000)
    jitter_dist: JitterDist | None = None
    loss_pct: float | None = Field(default=None, ge=0, le=100)
    up: bool | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> LinkChange:
        if not self.model_dump(exclude_none=True):
            raise ValueError("a link change must change at least one field")
        return self


class ScheduledChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(ge=0)
    link: str
    direction: ChangeDirection = "both"
    changes: LinkChange


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[ScheduledChange] = Field(default_factory=list)

    def ordered(self) -> list[ScheduledChange]:
        return sorted(self.events, key=lambda e: e.at_s)


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
