"""Which KV peer connections are pre-warmed, and with how many bytes (pure)."""

from __future__ import annotations

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.deploy.prewarm import warm_bytes, warm_pairs


def test_pdd_warms_p_and_rld_to_every_md() -> None:
    pairs = warm_pairs(load_scenario("pdd"))
    assert pairs == {"p0": ["md0", "md1"], "p1": ["md0", "md1"], "rld0": ["md0", "md1"]}


def test_same_dc_has_nothing_to_warm_across_a_wan() -> None:
    assert warm_pairs(load_scenario("same-dc-pd")) == {}


def test_four_bdps_of_the_scaled_wan() -> None:
    pdd = load_scenario("pdd").resolved("nfqueue")  # 1/20: 500 Mbit/s, RTT 2 x (15 + 3) ms
    assert warm_bytes(pdd) == 4 * int(500e6 / 8 * 0.036)
