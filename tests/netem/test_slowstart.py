"""The slow-start model and the cold-start compensation, against hand-computed cases."""

from __future__ import annotations

import pytest

from pddbench.netem.slowstart import (
    Compensation,
    PathModel,
    cold_transfer,
    is_cold,
    missing_s,
    wan_paths,
)
from pddbench.netem.topology import Topology
from pddbench.netem.topology_config import NetworkConfig

from .conftest import needs_root, new_test_run_id

# 1 MB/s, 100 ms RTT: BDP 100,000 B; MSS 1000 B, so the initial window is 10,000 B
RATE, RTT, KW = 1e6, 0.1, {"mss": 1000}


def test_a_transfer_inside_the_initial_window_takes_no_round() -> None:
    t = cold_transfer(10_000, RATE, RTT, **KW)
    assert (t.rounds, t.slow_start_bytes) == (0, 0)
    assert t.seconds == pytest.approx(0.01 + 0.05)  # 10 kB at 1 MB/s + half an RTT


def test_rounds_end_when_the_rest_fits_in_the_window() -> None:
    # windows 10k, 20k, 40k sent (70k); the last 30k fit in the 80k window
    t = cold_transfer(100_000, RATE, RTT, **KW)
    assert (t.rounds, t.slow_start_bytes) == (3, 70_000)
    assert t.seconds == pytest.approx(0.3 + 0.03 + 0.05)


def test_rounds_end_at_the_bdp_then_the_line_rate() -> None:
    # windows 10k, 20k, 40k, 80k (150k); the next, 160k, is above the 100k BDP
    t = cold_transfer(1_000_000, RATE, RTT, **KW)
    assert (t.rounds, t.slow_start_bytes) == (4, 150_000)
    assert t.seconds == pytest.approx(0.4 + 0.85 + 0.05)


def test_scaling_removes_rounds_and_missing_is_the_difference() -> None:
    # 1/10: 100 kB at 100 kB/s, BDP 10 kB = the initial window: no round, 1.0 + 0.05 s
    small = cold_transfer(100_000, RATE / 10, RTT, **KW)
    assert small.rounds == 0 and small.seconds == pytest.approx(1.05)
    assert missing_s(1_000_000, RATE, RTT, 10, **KW) == pytest.approx(1.3 - 1.05)
    assert missing_s(1_000_000, RATE, RTT, 1, **KW) == 0.0


def test_the_pdd_wan_at_one_twentieth() -> None:
    # 10 Gbit/s, 30 ms RTT, MSS 1448: 64 MiB needs 12 full rounds at 1/1, 7 at 1/20
    rate = 10e9 / 8
    assert cold_transfer(64 << 20, rate, 0.03).rounds == 12
    assert cold_transfer(round((64 << 20) / 20), rate / 20, 0.03).rounds == 7
    assert 0.12 < missing_s(64 << 20, rate, 0.03, 20) < 0.14


def test_a_connection_is_cold_when_new_or_idle_past_the_rto_with_restart() -> None:
    assert is_cold(None, 5.0, 0.03, slow_start_after_idle=False)
    assert not is_cold(1.0, 5.0, 0.03, slow_start_after_idle=False)
    assert is_cold(1.0, 5.0, 0.03, slow_start_after_idle=True)
    assert not is_cold(1.0, 1.2, 0.03, slow_start_after_idle=True)  # 0.2 s < RTT + 200 ms


def _three_sites(**extra: object) -> NetworkConfig:
    """a --(800 Mbit/s, 10 ms)-- b --(400 Mbit/s, 5 ms there, 7 ms back)-- c."""
    hosts = {"a": "p0", "b": "d0", "c": "m0"}
    sites = [{"name": site, "instances": [host]} for site, host in hosts.items()]
    ab = {"a": "a", "b": "b", "rate_mbit": 800, "delay_ms": 10}
    bc = {"a": "b", "b": "c", "rate_mbit": 400, "delay_ms": 5, "b_to_a": {"delay_ms": 7}}
    return NetworkConfig.model_validate({"sites": sites, "links": [ab, bc], **extra})


def test_wan_paths_sum_delays_both_ways_and_take_the_slowest_rate() -> None:
    paths = wan_paths(_three_sites(), "a")
    assert paths == {"b": PathModel(0.02, 100e6), "c": PathModel(0.032, 50e6)}


def test_compensation_waits_once_per_cold_peer_and_survives_the_environment() -> None:
    comp = Compensation(20, False, {"10.0.0.2": PathModel(0.03, 1.25e9)}, {})
    comp = Compensation.from_env(comp.to_env())
    assert comp is not None and comp.scale == 20
    want = missing_s(64 << 20, 1.25e9, 0.03, 20)
    assert comp.wait_s("10.0.0.2", 64 << 20, 0.0) == pytest.approx(want)
    assert comp.wait_s("10.0.0.9", 64 << 20, 0.0) == 0.0  # same site: no modelled path
    comp.used("10.0.0.2", 1.0)
    assert comp.wait_s("10.0.0.2", 64 << 20, 100.0) == 0.0  # warm, no restart after idle
    assert Compensation.from_env("") is None


def test_the_topology_gives_senders_their_peers_when_scaled_and_on() -> None:
    topo = Topology(_three_sites(scale=20), "sst1")
    assert topo.tcp.cold_start_compensation
    comp = topo.compensation("p0")
    assert comp is not None and comp.scale == 20
    by_host = {h.name: h.address for h in topo.plan.hosts}
    assert comp.paths[by_host["d0"]] == PathModel(0.02, 100e6)
    assert by_host["p0"] not in comp.paths  # same site
    off = Topology(_three_sites(scale=20, cold_start_compensation=False), "sst2")
    assert off.compensation("p0") is None and not off.tcp.cold_start_compensation
    assert Topology(_three_sites(), "sst3").compensation("p0") is None  # 1/1


@needs_root
@pytest.mark.root
def test_compensation_moves_a_cold_scaled_transfer_to_the_modelled_full_scale_time() -> None:
    from pddbench.netem.probe import Endpoint
    from pddbench.netem.transfer import Pair

    # 1 Gbit/s, 2 x 15 ms at 1/20: a 100-token KV handoff (46,490 B/token), 232 kB scaled
    cfg = NetworkConfig.model_validate(
        {
            "sites": [{"name": "a", "instances": ["p"]}, {"name": "b", "instances": ["d"]}],
            "links": [{"a": "a", "b": "b", "rate_mbit": 1000.0, "delay_ms": 15.0}],
            "scale": 20.0,
        }
    )
    modelled = 100 * 46_490
    full = 0.03 + cold_transfer(modelled, 125e6, 0.03).seconds  # handshake + slow start
    with Topology.up(cfg, new_test_run_id()) as topo:
        src = Endpoint(topo.netns("p"), topo.address("p"))
        dst = Endpoint(topo.netns("d"), topo.address("d"))
        comp = topo.compensation("p")
        assert comp is not None
        wait = comp.wait_s(dst.address, modelled, 0.0)
        assert wait == pytest.approx(missing_s(modelled, 125e6, 0.03, 20))
        times: dict[float, float] = {}
        for w in (0.0, wait):
            pair = Pair(src, dst, cfg.tcp_congestion)
            try:
                got = pair.send(round(modelled / 20), cold_wait_s=w)
            finally:
                pair.close()
            assert got.compensated_s == w
            times[w] = got.seconds
    raw, compensated = times[0.0], times[wait]
    assert abs(compensated - full) < abs(raw - full), (raw, compensated, full)
    assert abs(compensated / full - 1) < 0.25, (compensated, full)
