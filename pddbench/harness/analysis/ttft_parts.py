"""Where a request's TTFT goes: its parts from the reference servers' story.

Owns the decomposition of one request's TTFT (client send → first output token at the
client) into consecutive parts read from the ``pdd`` object the reference servers return
(kept verbatim in the records' ``server_timing`` column):

    to_router      client send → router arrival (client → router network and parsing)
    router_queue   arrival → routed (the router's decision)
    p_queue        routed → prefill start (admission and P's queue)
    prefill        prefill start → end (P, or C for a colocated instance)
    kv_transfer    prefill end → KV landing starts at the first-token instance (per path:
                   ``kv_path`` = wan | intra | …; only what was not hidden under prefill)
    kv_landing     landing start → end (scatter into the receiver's pages)
    first_decode   landing end → first token leaves the router (MD's first decode, or RLD's
                   eager first token on the relay path; ``first_origin`` says which)
    to_client      first token at the router → first token at the client

Boundaries are clamped to be non-decreasing (an overlap counts once, in the earlier part),
so the parts sum to TTFT exactly whenever the client's and servers' clocks are joined; a
negative ``to_client`` is a clock-join error and is kept visible, never clamped. Server
times are monotonic seconds of their host; they are joined to the client's run clock by
the manifest's clock origin when both sides share the host's monotonic clock, else through
each recorder's wall anchor (``clocks``). Also per request, outside TTFT: RLD's eager
tokens, the handoff's span and MD's extend time.

Sans-IO: JSON text and floats in, :class:`TtftParts` out.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from itertools import pairwise
from typing import Any

from pddbench.harness.rundir.manifest import RunManifest

PARTS: tuple[str, ...] = (
    "to_router",
    "router_queue",
    "p_queue",
    "prefill",
    "kv_transfer",
    "kv_landing",
    "first_decode",
    "to_client",
)
NAN = float("nan")


@dataclass(frozen=True)
class ClockJoin:
    """How server monotonic times map onto the client's run clock (seconds from origin)."""

    origin_monotonic_s: float | None  # client's origin on the host's monotonic clock
    origin_wall_s: float | None  # the same origin as epoch seconds
    host: str | None = None  # the client's host name

    @classmethod
    def of_manifest(cls, manifest: RunManifest) -> ClockJoin:
        clock = manifest.clock
        wall = clock.origin_wall
        wall_s = datetime.fromisoformat(wall).timestamp() if wall else None
        # "virtual": the twin's server times are run seconds already (origin 0)
        mono = clock.origin_monotonic_s if clock.kind in ("monotonic", "virtual") else None
        return cls(mono, wall_s, manifest.host.name or None)

    @classmethod
    def here(cls, clock: Callable[[], float]) -> ClockJoin:
        """The join of a client whose ``clock()`` reads run seconds on this host, now."""
        run_s = clock()
        return cls(time.monotonic() - run_s, time.time() - run_s, socket.gethostname())

    def offset(self, clocks: dict[str, Any]) -> float | None:
        """Subtract from a server monotonic time to get client run seconds (None: unknown)."""
        anchors = [a for a in clocks.values() if isinstance(a, dict)]
        same_host = all(self.host is None or a.get("host") in (None, self.host) for a in anchors)
        if self.origin_monotonic_s is not None and same_host:
            return self.origin_monotonic_s
        for a in anchors:  # another host: its wall anchor joins it to ours
            if self.origin_wall_s is not None and "mono" in a and "wall" in a:
                return float(a["mono"]) - (float(a["wall"]) - self.origin_wall_s)
        return None


@dataclass(frozen=True)
class TtftParts:
    """One request's TTFT parts (seconds; NaN when the story does not have them)."""

    to_router: float = NAN
    router_queue: float = NAN
    p_queue: float = NAN
    prefill: float = NAN
    kv_transfer: float = NAN
    kv_landing: float = NAN
    first_decode: float = NAN
    to_client: float = NAN
    kv_path: str | None = None
    first_origin: str | None = None
    rld_eager_tokens: float = NAN
    handoff_s: float = NAN
    extend_s: float = NAN

    def total(self) -> float:
        return math.fsum(getattr(self, p) for p in PARTS)

    def record_columns(self) -> dict[str, float | str | None]:
        """The record's columns (``ttft_<part>_s``, kv_path, handoff_s, extend_s); None: absent."""

        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        out: dict[str, float | str | None] = {f"ttft_{p}_s": num(getattr(self, p)) for p in PARTS}
        out.update(kv_path=self.kv_path, handoff_s=num(self.handoff_s), extend_s=num(self.extend_s))
        return out

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def decompose(
    server_timing: str | None, send_s: float, first_token_s: float, join: ClockJoin
) -> TtftParts:
    """The parts of one request (client times in run seconds); empty when not decomposable."""
    if not server_timing or not (math.isfinite(send_s) and math.isfinite(first_token_s)):
        return TtftParts()
    try:
        story = json.loads(server_timing)
    except ValueError:
        return TtftParts()
    return decompose_story(story, send_s, first_token_s, join)


def decompose_story(story: Any, send_s: float, first_token_s: float, join: ClockJoin) -> TtftParts:
    """:func:`decompose` of the story already parsed (what ``server_timing`` holds)."""
    if not (math.isfinite(send_s) and math.isfinite(first_token_s)):
        return TtftParts()
    if not isinstance(story, dict) or not isinstance(story.get("times"), dict):
        return TtftParts()
    offset = join.offset(story.get("clocks") or {})
    times = story["times"]
    if (
        offset is None
        or _num(times.get("arrival")) is None
        or _num(times.get("first_token")) is None
    ):
        return TtftParts()

    origin = story.get("first_token_origin")
    landed = (story.get("kv_landed") or {}).get(origin) if origin else None
    landed = landed if isinstance(landed, dict) else {}
    marks = [
        times.get("arrival"),
        times.get("routed"),
        times.get("prefill_start"),
        times.get("prefill_end"),
        landed.get("start"),
        landed.get("end"),
        times.get("first_token"),
    ]
    bounds = [send_s]
    for t in marks:
        v = _num(t)
        bounds.append(bounds[-1] if v is None else max(bounds[-1], v - offset))
    parts = [b - a for a, b in pairwise(bounds)]
    parts.append(first_token_s - bounds[-1])
    extras = _extras(story)
    return TtftParts(*parts, kv_path=landed.get("path"), first_origin=origin, **extras)


def _extras(story: dict[str, Any]) -> dict[str, float]:
    by_origin = story.get("tokens_by_origin") or {}
    out = {"rld_eager_tokens": float(by_origin.get("RLD", 0))}
    handoff = story.get("handoff")
    if isinstance(handoff, dict):
        start, end = _num(handoff.get("start")), _num(handoff.get("end"))
        out["handoff_s"] = end - start if start is not None and end is not None else NAN
        steps = [s for s in handoff.get("extend_steps") or [] if isinstance(s, dict)]
        spans = [(_num(s.get("start")), _num(s.get("end"))) for s in steps]
        out["extend_s"] = (
            math.fsum(b - a for a, b in spans if a is not None and b is not None) if spans else NAN
        )
    return out


def from_record(row: dict[str, Any]) -> TtftParts:
    """The parts a record's ``ttft_<part>_s`` columns hold (NaN where None)."""

    def num(key: str) -> float:
        v = row.get(key)
        return float(v) if v is not None else NAN

    return TtftParts(
        *(num(f"ttft_{p}_s") for p in PARTS),
        kv_path=row.get("kv_path"),
        first_origin=row.get("first_token_origin"),
        rld_eager_tokens=num("relay_tokens"),
        handoff_s=num("handoff_s"),
        extend_s=num("extend_s"),
    )


def decompose_rows(rows: list[dict[str, Any]], join: ClockJoin) -> list[TtftParts]:
    """The parts of every record (dicts with server_timing, actual_send_s, first_token_s)."""
    out = []
    for r in rows:
        send, first = _num(r.get("actual_send_s")), _num(r.get("first_token_s"))
        ok = r.get("status") == "ok" and send is not None and first is not None
        out.append(
            decompose(r.get("server_timing"), send, first, join)
            if ok  # type: ignore[arg-type]
            else TtftParts()
        )
    return out


@dataclass(frozen=True)
class PartsSummary:
    """Mean of each part over one group of decomposed ok requests."""

    pipeline: str
    hit_bin: str
    requests: int
    ttft_mean_s: float
    parts_mean_s: dict[str, float]


def summarise(
    parts: list[TtftParts], pipelines: list[str | None], hit_bins: list[str], ttft: list[float]
) -> list[PartsSummary]:
    """Mean parts by (pipeline, hit bin), decomposed requests only; groups sorted."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(parts):
        if math.isfinite(p.total()):
            groups.setdefault((pipelines[i] or "?", hit_bins[i]), []).append(i)
    out = []
    for (pipe, hbin), idx in sorted(groups.items()):
        n = len(idx)
        means = {k: math.fsum(getattr(parts[i], k) for i in idx) / n for k in PARTS}
        out.append(PartsSummary(pipe, hbin, n, math.fsum(ttft[i] for i in idx) / n, means))
    return out
