"""WAN schedules (E12): config expansion (pure) and a 10 → 2 → 10 Gbit/s swing during a
real transfer (root): the swing is in links.parquet and the transfer's time reflects it."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from pddbench.netem.topology_config import NetworkConfig

from .conftest import needs_root, new_test_run_id

SITES = [{"name": "a", "instances": ["p"]}, {"name": "b", "instances": ["d"]}]
LINK = {"name": "wan", "a": "a", "b": "b", "rate_mbit": 10_000.0, "delay_ms": 15.0}


def config(schedule: dict, scale: float = 20.0) -> NetworkConfig:
    return NetworkConfig.model_validate(
        {"sites": SITES, "links": [LINK], "scale": scale, "schedule": schedule}
    )


def test_a_swing_expands_into_drops_and_returns_per_direction() -> None:
    swing = {"link": "wan", "start_s": 2, "duration_s": 3, "fraction": 0.2, "every_s": 10}
    plan = config({"swings": [{**swing, "count": 2}]}).schedule_plan().ordered()
    got = [(e.at_s, e.direction, e.changes.rate_mbit) for e in plan]
    assert got == [
        (2, "a_to_b", 2000.0),
        (2, "b_to_a", 2000.0),
        (5, "a_to_b", 10000.0),
        (5, "b_to_a", 10000.0),
        (12, "a_to_b", 2000.0),
        (12, "b_to_a", 2000.0),
        (15, "a_to_b", 10000.0),
        (15, "b_to_a", 10000.0),
    ]


def test_schedule_errors_are_caught_at_load() -> None:
    with pytest.raises(ValidationError, match="unknown link 'nope'"):
        config({"events": [{"at_s": 1, "link": "nope", "changes": {"loss_pct": 1}}]})
    with pytest.raises(ValidationError, match="every_s longer than duration_s"):
        config(
            {
                "swings": [
                    {
                        "link": "wan",
                        "start_s": 0,
                        "duration_s": 2,
                        "fraction": 0.5,
                        "count": 3,
                        "every_s": 1,
                    }
                ]
            }
        )


def transfer_seconds(nbytes: float, start: float, rates: list[tuple[float, float]]) -> float:
    """Seconds to move ``nbytes`` from ``start`` under a piecewise rate (t, bytes/s)."""
    t, left = start, nbytes
    for i, (t_i, rate) in enumerate(rates):
        t_next = rates[i + 1][0] if i + 1 < len(rates) else float("inf")
        if t_next <= t:
            continue
        span = t_next - max(t, t_i)
        if left <= rate * span:
            return max(t, t_i) + left / rate - start
        left -= rate * span
        t = t_next
    raise AssertionError("unreachable")


@needs_root
@pytest.mark.root
def test_a_swing_during_a_transfer_is_recorded_and_slows_it(tmp_path: Path) -> None:
    from pddbench.netem.probe import Endpoint, write_link_probes
    from pddbench.netem.shaping import bdp_bytes
    from pddbench.netem.topology import Topology
    from pddbench.netem.transfer import Pair

    swing = {"link": "wan", "start_s": 0.3, "duration_s": 1.0, "fraction": 0.2}
    cfg = config({"swings": [swing]})
    nbytes = 40_000_000  # scaled: 0.64 s at 500 Mbit/s (10 Gbit/s / 20)
    with Topology.up(cfg, new_test_run_id()) as topo:
        src = Endpoint(topo.netns("p"), topo.address("p"))
        dst = Endpoint(topo.netns("d"), topo.address("d"))
        pair = Pair(src, dst, cfg.tcp_congestion)
        try:
            pair.warm(bdp_bytes(500.0, 30.0), idle_s=0.2)
            steady = pair.send(nbytes).seconds
            t0 = time.monotonic()
            wan = topo.start_wan_schedule(t0)
            assert wan is not None
            swung = pair.send(nbytes).seconds
            while time.monotonic() < t0 + 1.5:  # the return to 10 Gbit/s has happened
                time.sleep(0.05)
            records = wan.stop()
        finally:
            pair.close()
    out = tmp_path / "links.parquet"
    write_link_probes([], str(out), records)
    rows = [r for r in pq.read_table(out).to_pylist() if r["kind"] == "change"]
    timeline = [(r["at_s"], r["direction"], r["rate_mbit"]) for r in rows]
    for direction in ("a_to_b", "b_to_a"):
        mine = [(t, rate) for t, d, rate in timeline if d == direction]
        assert mine == [(0.0, 10000.0), (0.3, 2000.0), (1.3, 10000.0)], timeline
    # timestamps: when each change took effect (a busy 2-core machine applies it late)
    late = [r["t_mono"] - t0 - r["at_s"] for r in rows]
    assert all(0 <= x < 0.25 for x in late), late
    # 500 Mbit/s → 100 Mbit/s → 500 Mbit/s, scaled; the transfer started at ~t0. Outside the
    # swing the transfer moves at the rate it achieved when steady (the delay stage of a
    # 2-core machine may carry less than the line); during it, at most the swung rate.
    achieved = nbytes / (steady - 0.015)  # bytes/s, one one-way delay aside
    swung_rate = min(achieved, 500e6 / 8 / 5)
    model = 0.015 + transfer_seconds(
        nbytes, 0.0, [(0.0, achieved), (0.3, swung_rate), (1.3, achieved)]
    )
    print(f"transfer: steady {steady:.3f} s, with the swing {swung:.3f} s, model {model:.3f} s")
    assert swung - steady > 0.5 * (model - steady), (steady, swung, model)
    assert abs(swung - model) / model < 0.2, (steady, swung, model)


@needs_root
@pytest.mark.root
def test_cross_traffic_shares_the_line_and_is_recorded() -> None:
    from pddbench.netem.topology import Topology

    flow = {"link": "wan", "direction": "a_to_b", "start_s": 0.1, "duration_s": 1.0}
    cfg = config({"cross_traffic": [{**flow, "rate_mbit": 4000.0}]})  # 200 Mbit/s scaled
    with Topology.up(cfg, new_test_run_id()) as topo:
        t0 = time.monotonic()
        wan = topo.start_wan_schedule(t0)
        assert wan is not None
        while time.monotonic() < t0 + 1.3:
            time.sleep(0.05)
        records = wan.stop()
    cross = [r for r in records if r.cross_traffic_mbit is not None]
    assert [r.changes["cross_traffic"] for r in cross] == ["start", "stop"]
    start, stop = cross
    assert start.direction == "a_to_b" and start.at_s == 0.1
    # paced at 4 Gbit/s configured, stopped after ~1 s: the ceiling says it was paced. A 1 s
    # flow's mean includes its slow start and, on a 2-vCPU VM whose vCPUs the hypervisor
    # wakes late, a delay stage that falls far behind (1,489 and 194 seen in CI runs), so
    # the floor only says the flow really ran and its goodput was recorded
    assert 50 < start.cross_traffic_mbit < 4400, start.cross_traffic_mbit
    assert 0.9 < stop.at_s - start.at_s < 1.5
