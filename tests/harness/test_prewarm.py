"""Which KV peer connections are pre-warmed, and with how many bytes (pure)."""

from __future__ import annotations

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.deploy.prewarm import warm_bytes, warm_pairs


def test_pdd_warms_p_and_rld_to_every_md() -> None:
    pdd = load_scenario("pdd")
    assert pdd.deployment is not None
    roles = {i.id: i.role for i in pdd.deployment.instances}
    mds = [n for n, r in roles.items() if r == "main-decode"]
    senders = {n for n, r in roles.items() if r in ("prefill", "relay-decode")}
    assert mds and "rld0" in senders and "p0" in senders
    assert warm_pairs(pdd) == {s: mds for s in senders}


def test_same_dc_has_nothing_to_warm_across_a_wan() -> None:
    assert warm_pairs(load_scenario("same-dc-pd")) == {}


def test_four_bdps_of_the_scaled_wan() -> None:
    pdd = load_scenario("pdd").resolved("nfqueue")  # 1/100: 1 Gbit/s, RTT 2 x (15 + 3) ms
    assert warm_bytes(pdd) == 4 * int(1000e6 / 8 * 0.036)
