"""The live view of a running replay: a refreshing status line on a terminal, log lines elsewhere.

Shows sent, in flight, done, errors, censored (cut by the harness's own request limit: not
errors, see :class:`~pddbench.harness.rundir.records.Status`), TTFT P50/P99 so far and
schedule lag P99. On a
terminal it redraws one line (rich) every ``interval_s``; when stderr is not a terminal
(CI, nohup, pipes) it prints a plain line every ``log_interval_s`` instead.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console

from pddbench.harness.rundir.records import RequestRecord, Status

KEEP = 20000  # most recent TTFT / lag samples kept for the view


@dataclass
class LiveCounters:
    """What the live view shows of a running replay; every engine keeps one up to date."""

    sent: int = 0
    done: int = 0
    errors: int = 0  # settled neither ok nor censored
    censored: int = 0  # cut by the harness's own request limit while still answering
    in_flight: int = 0
    ttft_s: list[float] = field(default_factory=list)
    lag_s: list[float] = field(default_factory=list)

    def count(self, record: RequestRecord) -> None:
        """A settled request: one more done (and error, unless it is ok or censored)."""
        self.done += 1
        if record.status == Status.CENSORED:
            self.censored += 1
        elif record.status != Status.OK:
            self.errors += 1

    def observe(self, record: RequestRecord) -> None:
        """A settled request's TTFT and schedule lag (beyond any concurrency-cap wait)."""
        if record.ttft_s is not None:
            self.ttft_s.append(record.ttft_s)
        lag = record.send_lag_s
        if lag is not None:
            self.lag_s.append(lag - record.client_queue_s)
        for values in (self.ttft_s, self.lag_s):  # the view reads a recent window only
            if len(values) > KEEP:
                del values[: KEEP // 2]

    def settle(self, record: RequestRecord) -> None:
        """:meth:`count` and :meth:`observe` (a backend that sees every record itself)."""
        self.count(record)
        self.observe(record)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    tail = values[-5000:]  # recent window keeps this cheap on long runs
    return float(np.percentile(tail, q))


def status_line(stats: LiveCounters, total: int, elapsed_s: float, label: str = "") -> str:
    """One line describing progress (pure: tested without a terminal)."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.0f}ms"

    prefix = f"[{label}] " if label else ""
    return (
        f"{prefix}{elapsed_s:6.0f}s sent {stats.sent}/{total} in-flight {stats.in_flight} "
        f"done {stats.done} errors {stats.errors} censored {stats.censored} | "
        f"TTFT p50 {ms(_pct(stats.ttft_s, 50))} "
        f"p99 {ms(_pct(stats.ttft_s, 99))} | lag p99 {ms(_pct(stats.lag_s, 99))}"
    )


class LiveView:
    """Periodically renders :func:`status_line` for a running engine."""

    def __init__(
        self,
        label: str = "",
        *,
        interval_s: float = 0.5,
        log_interval_s: float = 10.0,
        console: Console | None = None,
    ):
        self.label = label
        self.console = console or Console(stderr=True)
        self.is_terminal = self.console.is_terminal and sys.stderr.isatty()
        self.interval_s = interval_s if self.is_terminal else log_interval_s

    async def run(self, stats: LiveCounters, *, total: int) -> None:
        start = time.monotonic()
        try:
            if self.is_terminal:
                with self.console.status("") as status:
                    while True:
                        status.update(
                            status_line(stats, total, time.monotonic() - start, self.label)
                        )
                        await asyncio.sleep(self.interval_s)
            else:
                while True:
                    await asyncio.sleep(self.interval_s)
                    print(
                        status_line(stats, total, time.monotonic() - start, self.label),
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            if not self.is_terminal:
                print(
                    status_line(stats, total, time.monotonic() - start, self.label),
                    file=sys.stderr,
                    flush=True,
                )
