"""Sweeps of the emulated WAN link (E12): which points to run and the scenario of each.

Owns the pure part of a WAN sweep: reading the declared points per dimension (link
rate, jitter, loss — each list ordered from the scenarios' own line towards the harsh
end), planning them into :class:`SweepPoint` objects (one dimension changed at a time,
the others left at the scenario's own values; the point equal to the scenario's own
line is the *base* point, shared by every dimension and by the other experiments'
replays of the unchanged scenario), and writing the per-point scenario: the built-in's
TOML with the ``[[network.links]]`` WAN entry (and the router's configured line rate)
overridden, under a new name. Also the interval of a ratio of two percentiles.

No I/O, no clocks; randomness only through an explicit seed.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# link field swept -> (short tag used in value and run names, axis label)
DIMENSIONS: dict[str, tuple[str, str]] = {
    "rate_mbit": ("rate", "WAN rate (Mbit/s)"),
    "jitter_ms": ("jitter", "WAN jitter (± ms, one way)"),
    "loss_pct": ("loss", "WAN loss (%)"),
}


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: ``dimension`` set to ``value`` (None: the base point)."""

    dimension: str | None
    value: float | None

    @property
    def key(self) -> str:
        """A short name for values and run folders: ``base``, ``rate2500``, ``loss0.1``."""
        if self.dimension is None or self.value is None:
            return "base"
        return f"{DIMENSIONS[self.dimension][0]}{self.value:g}"

    def run_name(self, scenario: str) -> str:
        """The scenario name of this point (the scenario itself at the base point)."""
        return scenario if self.key == "base" else f"{scenario}.{self.key}"


def base_link(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario's WAN link: the ``[[network.links]]`` entry named ``wan``, else the
    first one; a scenario without one cannot be swept."""
    links = (scenario.get("network") or {}).get("links") or []
    if not links:
        raise ValueError(f"scenario {scenario.get('name')!r} has no [[network.links]] to sweep")
    named = [link for link in links if link.get("name") == "wan"]
    return (named or links)[0]


def link_value(link: Mapping[str, Any], dimension: str) -> float:
    """The link's own value of ``dimension`` (the schema's default 0 for jitter and loss)."""
    if dimension not in DIMENSIONS:
        raise ValueError(f"unknown sweep dimension {dimension!r} (known: {', '.join(DIMENSIONS)})")
    v = link.get(dimension)
    if v is None:
        if dimension == "rate_mbit":
            raise ValueError("the swept WAN link has no rate_mbit (an unshaped rate)")
        return 0.0
    return float(v)


def plan_points(points: Mapping[str, Sequence[float]], base: Mapping[str, Any]) -> list[SweepPoint]:
    """The base point, then each dimension's other points in declared order.

    ``points[dim][0]`` must be the base link's own value (the sweep starts from the line
    the other experiments replay); a value equal to it later is not run twice.
    """
    out = [SweepPoint(None, None)]
    for dim, values in points.items():
        own = link_value(base, dim)
        if not values or not math.isclose(float(values[0]), own):
            raise ValueError(
                f"sweep of {dim}: the first point must be the scenario's own {own:g} "
                f"(declared {list(values)})"
            )
        for v in values[1:]:
            if not math.isclose(float(v), own):
                out.append(SweepPoint(dim, float(v)))
    return out


def dimension_points(plan: Sequence[SweepPoint], dimension: str) -> list[SweepPoint]:
    """The base point followed by ``dimension``'s own points, in order (one trend line)."""
    return [p for p in plan if p.dimension in (None, dimension)]


def point_value(point: SweepPoint, dimension: str, base: Mapping[str, Any]) -> float:
    """``dimension``'s value at ``point`` (the base link's own value at the base point)."""
    if point.dimension == dimension and point.value is not None:
        return point.value
    return link_value(base, dimension)


def override_scenario(data: Mapping[str, Any], point: SweepPoint) -> dict[str, Any]:
    """The scenario tree at ``point``: renamed, its WAN link's field set (also in the
    per-direction overrides that would shadow it), and for a rate the router's configured
    line rate (``deployment.routing.wan_bandwidth_gbps``, its prior before it measures)."""
    out = copy.deepcopy(dict(data))
    out["name"] = point.run_name(str(data["name"]))
    if point.dimension is None or point.value is None:
        return out
    link = base_link(out)
    link[point.dimension] = point.value
    for side in ("a_to_b", "b_to_a"):
        if isinstance(link.get(side), dict) and point.dimension in link[side]:
            link[side][point.dimension] = point.value
    routing = (out.get("deployment") or {}).get("routing")
    if (
        point.dimension == "rate_mbit"
        and isinstance(routing, dict)
        and "wan_bandwidth_gbps" in routing
    ):
        routing["wan_bandwidth_gbps"] = point.value / 1000.0
    note = f"WAN sweep point {point.key} of {data['name']}"
    out["description"] = f"{data.get('description', '')} [{note}]".strip()
    return out


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("TOML here holds finite numbers only")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_scalar(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"cannot write {type(v).__name__} as TOML")


def _is_table_list(v: object) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dump_toml(data: Mapping[str, Any]) -> str:
    """A TOML text that ``tomllib`` reads back as ``data`` (scalars, lists, tables,
    arrays of tables: what a scenario holds)."""
    lines: list[str] = []

    def table(d: Mapping[str, Any], path: list[str], header: str | None) -> None:
        if header is not None:
            lines.append(header)
        for k, v in d.items():
            if not isinstance(v, dict) and not _is_table_list(v):
                lines.append(f"{_key(k)} = {_scalar(v)}")
        for k, v in d.items():
            sub = [*path, _key(k)]
            if isinstance(v, dict):
                table(v, sub, f"[{'.'.join(sub)}]")
            elif _is_table_list(v):
                for item in v:
                    table(item, sub, f"[[{'.'.join(sub)}]]")

    table(data, [], None)
    return "\n".join(lines) + "\n"


def point_scenario_text(text: str, point: SweepPoint) -> str:
    """The TOML of a scenario (``text``) overridden at ``point``."""
    return dump_toml(override_scenario(tomllib.loads(text), point))


def ratio_interval(
    a: np.ndarray, b: np.ndarray, q: float, *, reps: int = 400, seed: int = 0
) -> tuple[float, float, float]:
    """percentile_q(a) / percentile_q(b) and a 95 % bootstrap interval (a and b resampled
    independently: two replays); NaN where either sample is empty."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0 or float(np.percentile(b, q)) == 0:
        return math.nan, math.nan, math.nan
    value = float(np.percentile(a, q) / np.percentile(b, q))
    rng = np.random.default_rng(seed)
    draws = [
        np.percentile(a[rng.integers(0, a.size, a.size)], q)
        / max(np.percentile(b[rng.integers(0, b.size, b.size)], q), 1e-12)
        for _ in range(reps)
    ]
    return value, float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))
