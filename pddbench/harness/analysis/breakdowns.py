"""Breakdowns: the same metrics computed per group of requests, and the error table.

Dimensions:

* ``hit_bin`` — the seven published hit-rate bins (hit rate as in ``recordset``), plus
  ``unknown`` when cached tokens are not known;
* ``pipeline`` — the pipeline the server reports (``n/a`` when it reports none);
* ``turn`` — the turn index in buckets ``0``, ``1``, ``2-4``, ``5-9``, ``10-19``,
  ``20-49``, ``50+`` (later turns of agent tasks hit the cache almost entirely);
* ``agent_type`` — only when some record has one (the trace's ``agent_type``, copied
  into every record by the replay).

Every group's metrics come from the registry over that group's records, with the *run's*
window as duration, so group rates (goodput, RPS) add up to the run's. Groups without
records are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pddbench.harness.analysis.recordset import HIT_BIN_LABELS, UNKNOWN, RecordSet
from pddbench.harness.analysis.registry import Context, MetricRegistry, MetricSet

BREAKDOWN_TAGS: tuple[str, ...] = (
    "ttft",
    "tpot",
    "e2e",
    "itl_mean",
    "itl_req_max",
    "sla_attainment",
    "goodput",
    "completed_rps",
    "error_rate",
    "censored_rate",
    "hit_rate",
    "cache_fidelity",
    "wan_bytes_req",
    "rld_token_share",
    "relayed_share",
)
TURN_BUCKETS: tuple[tuple[int, int | None, str], ...] = (
    (0, 1, "0"),
    (1, 2, "1"),
    (2, 5, "2-4"),
    (5, 10, "5-9"),
    (10, 20, "10-19"),
    (20, 50, "20-49"),
    (50, None, "50+"),
)


@dataclass(frozen=True)
class Group:
    label: str
    requests: int
    share: float  # of the run's records
    metrics: MetricSet


@dataclass(frozen=True)
class Breakdown:
    dimension: str
    title: str
    groups: tuple[Group, ...]

    def labels(self) -> tuple[str, ...]:
        return tuple(g.label for g in self.groups)


def group_codes(records: RecordSet, dimension: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per-record group index (-1 = unknown, shown last) and the group labels."""
    if dimension == "hit_bin":
        return records.hit_bin, HIT_BIN_LABELS
    if dimension == "turn":
        turn = records.col("turn_index")
        codes = np.full(records.n, -1, dtype=np.int64)
        for i, (lo, hi, _) in enumerate(TURN_BUCKETS):
            sel = (turn >= lo) if hi is None else (turn >= lo) & (turn < hi)
            codes[sel] = i
        return codes, tuple(label for _, _, label in TURN_BUCKETS)
    if dimension in records.cat:
        cat = records.cat[dimension]
        return cat.codes.astype(np.int64), cat.labels
    raise KeyError(dimension)


TITLES = {
    "hit_bin": "by prefix hit-rate bin",
    "pipeline": "by pipeline",
    "turn": "by turn index",
    "agent_type": "by agent type",
}
NULL_LABELS = {"hit_bin": UNKNOWN, "pipeline": "n/a", "turn": UNKNOWN, "agent_type": "n/a"}


def available_dimensions(records: RecordSet) -> tuple[str, ...]:
    dims = ["hit_bin", "pipeline", "turn"]
    if records.cat["agent_type"].labels:  # some record has an agent type
        dims.append("agent_type")
    return tuple(dims)


def breakdown(
    records: RecordSet,
    dimension: str,
    registry: MetricRegistry,
    ctx: Context,
    tags: Sequence[str] = BREAKDOWN_TAGS,
) -> Breakdown:
    """The metrics ``tags`` per group of ``dimension`` (groups without records left out)."""
    codes, labels = group_codes(records, dimension)
    ctx = replace(ctx, duration_s=records.duration_s if ctx.duration_s is None else ctx.duration_s)
    groups: list[Group] = []
    total = max(records.n, 1)
    for code, label in [*enumerate(labels), (-1, NULL_LABELS.get(dimension, UNKNOWN))]:
        mask = codes == code
        count = int(np.count_nonzero(mask))
        if count == 0:
            continue
        metrics = registry.compute(records.subset(mask), ctx, tags)
        groups.append(Group(label, count, count / total, metrics))
    return Breakdown(dimension, TITLES.get(dimension, f"by {dimension}"), tuple(groups))


@dataclass(frozen=True)
class ErrorRow:
    status: str
    error_class: str
    requests: int
    share: float  # of all records


def error_table(records: RecordSet) -> tuple[ErrorRow, ...]:
    """Records that did not end ok, by status and error class, most frequent first."""
    bad = ~records.ok
    if not bad.any():
        return ()
    status, klass = records.cat["status"], records.cat["error_class"]
    width = len(klass.labels) + 1
    keys = (status.codes[bad].astype(np.int64) + 1) * width + (klass.codes[bad] + 1)
    uniq, counts = np.unique(keys, return_counts=True)
    status_names = ("n/a", *status.labels)
    class_names = ("-", *klass.labels)
    rows = [
        ErrorRow(status_names[k // width], class_names[k % width], int(c), int(c) / records.n)
        for k, c in zip(uniq.tolist(), counts.tolist(), strict=True)
    ]
    rows.sort(key=lambda r: (-r.requests, r.status, r.error_class))
    return tuple(rows)
