"""The bounded default replay of a long trace, for ``pddbench replay`` without selection.

A two-month trace cannot be replayed whole, so when the user chose no window, sample,
speed-up, request cap or duration, the replay takes the **busiest hour** of session starts
(whole task groups), compresses their arrivals ×10 and stops sending after 90 s per
system — about two requests per second against each system, enough to load the emulated
WAN to roughly half its rate with the jan-feb profile. It says which window it took.
Sans-IO: reads the trace table, returns new options and the sentence to print.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.workloads.schema import Col

LONG_TRACE_S = 3600.0
WINDOW_S = 3600.0
SPEEDUP = 10.0
DURATION_S = 90.0


def is_default_selection(options: ReplayOptions) -> bool:
    """True when the user gave no selection or duration option at all."""
    return options.selection == Selection(seed=options.selection.seed) and (
        options.max_duration_s is None
    )


def busiest_window_start(table: pa.Table, window_s: float = WINDOW_S) -> float:
    """Start (offset, s) of the window of ``window_s`` with the most session starts."""
    turns = table.column(Col.TURN_INDEX).to_numpy(zero_copy_only=False)
    arrival = table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False).astype(np.float64)
    starts = np.sort(arrival[turns == 0]) if np.any(turns == 0) else np.sort(arrival)
    if starts.size == 0:
        return 0.0
    # sliding window over sorted starts: count of starts in [s_i, s_i + window)
    ends = np.searchsorted(starts, starts + window_s, side="left")
    best = int(np.argmax(ends - np.arange(starts.size)))
    return float(starts[best])


def default_selection(
    table: pa.Table, options: ReplayOptions, epoch: str | None
) -> tuple[ReplayOptions, str | None]:
    """Options bounded to the default window when the trace is long and nothing was chosen."""
    arrival = table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False)
    span = float(arrival.max() - arrival.min()) if arrival.size else 0.0
    if span <= LONG_TRACE_S or not is_default_selection(options):
        return options, None
    start = busiest_window_start(table)
    selection = dataclasses.replace(
        options.selection, window_start_s=start, window_duration_s=WINDOW_S, speedup=SPEEDUP
    )
    where = f"offset {start / 3600:.1f} h"
    if epoch:
        try:
            t0 = datetime.fromisoformat(epoch.replace("Z", "+00:00"))
            where = (t0 + timedelta(seconds=start)).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            pass
    note = (
        f"the trace spans {span / 86400:.1f} days: replaying the busiest hour of session "
        f"starts ({where}), arrivals compressed x{SPEEDUP:g}, {DURATION_S:g} s per system "
        "(choose with --window/--speedup/--duration)"
    )
    return dataclasses.replace(options, selection=selection, max_duration_s=DURATION_S), note
