"""The twin's link model applies ``[network.schedule]`` as the emulated WAN does: the same
expanded schedule, stepped by the same rule, with exact effects on transfer and message
times; and it counts what each WAN direction carried."""

from __future__ import annotations

import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.netem.slowstart import PAYLOAD_SHARE
from pddbench.netem.topology_config import (
    CrossTraffic,
    LinkChange,
    NetworkConfig,
    RateSwing,
    ScheduledChange,
    SegmentConfig,
    WanSchedule,
)
from pddbench.servers.config import DeploymentConfig
from pddbench.twin.links import Network, wan_timelines
from pddbench.twin.sim import Sim

MB = 1e6
LINE_MBIT = 800.0 / PAYLOAD_SHARE  # carries 800 Mbit/s of TCP payload


def pdd(schedule: WanSchedule) -> tuple[DeploymentConfig, NetworkConfig]:
    """pdd (P in dc-a, MD in dc-b) over a 10 ms line, no jitter, whose TCP payload rate is
    800 Mbit/s (100 MB/s: the line is ``800 / PAYLOAD_SHARE``, the headers' share on top)."""
    sc = load_scenario("pdd").model_copy(update={"emulation_scale": 1.0})
    net = sc.network_config()
    line = {"rate_mbit": LINE_MBIT, "delay_ms": 10.0, "jitter_ms": 0.0}
    link = net.links[0].model_copy(update=line)
    net = net.model_copy(update={"links": [link], "schedule": schedule, "segment": SegmentConfig()})
    return sc.deployment_config, net


def network_on(dep: DeploymentConfig, net: NetworkConfig) -> tuple[Network, Sim]:
    network = Network(dep, net, 0, prewarmed=True)
    sim = Sim()
    network.at = sim.at
    return network, sim


def transfer(
    network: Network, sim: Sim, t: float, nbytes: float, src: str = "p0", dst: str = "md0"
) -> list[float]:
    """Puts ``nbytes`` on ``src`` -> ``dst`` at ``t``; the list gets the drain time."""
    dep = network.dep
    a, b = dep.instance(src), dep.instance(dst)
    out: list[float] = []
    flow = network.flow(a, b, out.append)
    sim.at(t, network.put, flow, t, a, b, nbytes)
    return out


def ends(dep: DeploymentConfig, net: NetworkConfig, t: float, nbytes: float) -> float:
    network, sim = network_on(dep, net)
    end = transfer(network, sim, t, nbytes)
    sim.run()
    return end[0]


def test_a_scheduled_rate_drop_lengthens_a_transfer_exactly_as_the_schedule_says() -> None:
    swing = RateSwing(link="wan", direction="a_to_b", start_s=1.0, duration_s=2.0, fraction=0.5)
    dep, net = pdd(WanSchedule(swings=[swing]))
    # 200 MB from 0.5 s: 50 MB by 1 s at 100 MB/s, 100 MB over [1, 3] at 50 MB/s, the last
    # 50 MB at 100 MB/s again: off the line at 3.5 s (2.5 s without the swing)
    assert ends(dep, net, 0.5, 200 * MB) == pytest.approx(3.5, rel=1e-12)
    assert ends(*pdd(WanSchedule()), 0.5, 200 * MB) == pytest.approx(2.5, rel=1e-12)
    # the other direction is not swung
    network, sim = network_on(dep, net)
    back = transfer(network, sim, 0.5, 200 * MB, "md0", "p0")
    sim.run()
    assert back[0] == pytest.approx(2.5, rel=1e-12)


def test_the_timeline_is_the_emulated_schedule_expanded_and_stepped() -> None:
    swing = RateSwing(link="wan", start_s=1.0, duration_s=2.0, fraction=0.25, every_s=5, count=2)
    loss = ScheduledChange(at_s=4.0, link="wan", direction="b_to_a", changes=LinkChange(loss_pct=1))
    _, net = pdd(WanSchedule(swings=[swing], events=[loss]))
    lines = wan_timelines(net)
    ab = [(s.t_s, s.shape.rate_mbit) for s in lines[("wan", "a_to_b")]]
    assert [t for t, _ in ab] == [0, 1, 3, 6, 8]
    quarter = LINE_MBIT / 4
    assert [r for _, r in ab] == pytest.approx([LINE_MBIT, quarter, LINE_MBIT, quarter, LINE_MBIT])
    ba = lines[("wan", "b_to_a")]
    assert [s.t_s for s in ba] == [0, 1, 3, 4, 6, 8]
    assert ba[3].shape.loss_pct == 1 and ba[4].shape.loss_pct == 1
    assert ba[3].changes == {"loss_pct": 1.0}
    assert len(net.schedule_plan().events) == 9  # the same expansion the emulated WAN runs


def test_a_downed_link_holds_messages_and_bytes_until_it_is_back() -> None:
    down = ScheduledChange(at_s=1.0, link="wan", changes=LinkChange(up=False))
    up = ScheduledChange(at_s=2.0, link="wan", changes=LinkChange(up=True))
    dep, net = pdd(WanSchedule(events=[down, up]))
    network = Network(dep, net, 0, prewarmed=True)
    p, md = dep.instance("p0"), dep.instance("md0")
    arrival = network.control(1.5, p, md)
    assert arrival == pytest.approx(2.0 + 0.010 + 512 / 100e6)
    # 100 MB from 0.5 s: 50 MB by 1 s, nothing over [1, 2], the rest by 2.5 s
    assert ends(dep, net, 0.5, 100 * MB) == pytest.approx(2.5, rel=1e-12)


def test_cross_traffic_takes_its_pacing_or_a_fair_share_from_the_bulk_class() -> None:
    paced = CrossTraffic(link="wan", start_s=0.0, duration_s=10.0, rate_mbit=200.0)
    dep, net = pdd(WanSchedule(cross_traffic=[paced]))
    assert ends(dep, net, 0.0, 75 * MB) == pytest.approx(1.0, rel=1e-12)  # 600 Mbit/s left
    greedy = CrossTraffic(link="wan", start_s=1.0, duration_s=1.0)
    dep, net = pdd(WanSchedule(cross_traffic=[greedy]))
    # 200 MB from 0: 100 MB by 1 s, 50 MB over [1, 2] (half the line), the last 50 MB by 2.5 s
    assert ends(dep, net, 0.0, 200 * MB) == pytest.approx(2.5, rel=1e-12)
    network = Network(dep, net, 0, prewarmed=True)  # control is not slowed
    assert network.control(1.5, dep.instance("p0"), dep.instance("md0")) == pytest.approx(
        1.5 + 0.010 + 512 / 100e6
    )


def test_usage_counts_every_bulk_byte_in_the_interval_it_crossed_the_line() -> None:
    swing = RateSwing(link="wan", direction="a_to_b", start_s=1.0, duration_s=2.0, fraction=0.5)
    dep, net = pdd(WanSchedule(swings=[swing]))
    network, sim = network_on(dep, net)
    network.track_usage(1.0)
    transfer(network, sim, 0.5, 200 * MB)
    sim.run()
    d = network.wan_direction("wan", "a_to_b")
    assert d is not None and d.usage is not None
    got = {k: round(v / MB, 6) for k, v in sorted(d.usage.bulk.items())}
    assert got == {0: 50, 1: 50, 2: 50, 3: 50}
    assert d.mean_line_bytes_per_s(0.0, 2.0) == pytest.approx(75 * MB)


def test_concurrent_transfers_share_the_line_fairly() -> None:
    """Processor sharing, as TCP flows through one bottleneck: 100 MB alone takes 1 s at
    100 MB/s; a second 100 MB transfer that starts at 0.5 s halves both rates, so the first
    ends at 1.5 s (50 MB left at 50 MB/s) and the second at 2.0 s (the line never idles)."""
    dep, net = pdd(WanSchedule())
    network, sim = network_on(dep, net)
    first = transfer(network, sim, 0.0, 100 * MB)
    second = transfer(network, sim, 0.5, 100 * MB)
    other_way = transfer(network, sim, 0.5, 100 * MB, "md0", "p0")  # its own line
    sim.run()
    assert first[0] == pytest.approx(1.5, rel=1e-12)
    assert second[0] == pytest.approx(2.0, rel=1e-12)
    assert other_way[0] == pytest.approx(1.5, rel=1e-12)


def test_a_flow_fed_in_chunks_leaves_the_share_while_it_waits_for_its_next_chunk() -> None:
    """P's sender puts each prefill chunk's KV on the line as it is computed: between chunks
    its flow has nothing to send and takes no share."""
    dep, net = pdd(WanSchedule())
    network, sim = network_on(dep, net)
    p, md = dep.instance("p0"), dep.instance("md0")
    drains: list[float] = []
    chunked = network.flow(p, md, drains.append)
    sim.at(0.0, network.put, chunked, 0.0, p, md, 10 * MB)  # drains at 0.1 s
    sim.at(1.0, network.put, chunked, 1.0, p, md, 10 * MB)  # again at 1.1 s
    other = transfer(network, sim, 0.05, 100 * MB)
    sim.run()
    # [0, 0.05] the chunk alone (5 MB); [0.05, 0.15] two flows at 50 MB/s: the chunk's last
    # 5 MB end at 0.15 s; the other alone from then (95 MB left) carries 85 MB by 1.0 s;
    # from 1.0 s both have 10 MB at 50 MB/s: both end at 1.2 s
    assert drains[0] == pytest.approx(0.15, rel=1e-9)
    assert drains[1] == pytest.approx(1.2, rel=1e-9)
    assert other[0] == pytest.approx(1.2, rel=1e-9)


def test_a_connection_below_the_line_is_capped_and_the_line_shared_above_it() -> None:
    """A calibrated flow cap (one warm connection's most: its window over the RTT): on a
    100 MB/s line with a 40 MB/s cap, 100 MB alone takes 2.5 s, not 1 s; two flows carry
    40 MB/s each (the line is not their bound); three share the line at 33.3 MB/s each.
    The line's usage counts what the flows carried, not the line's rate."""
    dep, net = pdd(WanSchedule())
    caps = {("wan", "a_to_b"): 40 * MB}
    network = Network(dep, net, 0, prewarmed=True, flow_caps=caps)
    sim = Sim()
    network.at = sim.at
    network.track_usage(1.0)
    alone = transfer(network, sim, 0.0, 100 * MB)
    sim.run()
    assert alone[0] == pytest.approx(2.5, rel=1e-12)
    d = network.wan_direction("wan", "a_to_b")
    assert d is not None and d.usage is not None
    assert {k: round(v / MB, 6) for k, v in sorted(d.usage.bulk.items())} == {0: 40, 1: 40, 2: 20}

    network = Network(dep, net, 0, prewarmed=True, flow_caps=caps)
    sim = Sim()
    network.at = sim.at
    two = [transfer(network, sim, 0.0, 40 * MB) for _ in range(2)]
    three = [transfer(network, sim, 5.0, 100 * MB / 3) for _ in range(3)]
    back = transfer(network, sim, 0.0, 100 * MB, "md0", "p0")  # no cap that way
    sim.run()
    assert [t[0] for t in two] == [pytest.approx(1.0, rel=1e-12)] * 2
    assert [t[0] for t in three] == [pytest.approx(6.0, rel=1e-12)] * 3
    assert back[0] == pytest.approx(1.0, rel=1e-12)
