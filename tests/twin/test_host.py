"""Host costs: fitted per hop from paired records, added by the twin where the hop happens."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.twin.host import HOPS, HostCosts, fit_host_costs
from pddbench.twin.run import run_twin

from .plans import hashes_for, plan


def records(n: int, parts: dict[str, float], *, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    cols: dict[str, object] = {
        "request_id": [f"r{i}" for i in range(n)],
        "status": ["ok"] * n,
        "kv_path": ["intra"] * n,
    }
    for part in HOPS.values():
        base = parts.get(part, 0.0)
        cols[f"ttft_{part}_s"] = base + noise * rng.standard_exponential(n)
    return pd.DataFrame(cols)


def test_fit_takes_each_hops_median_excess_and_never_a_negative_cost() -> None:
    virtual = records(200, {"router_queue": 0.010, "kv_landing": 0.001})
    emulated = records(200, {"to_router": 0.002, "router_queue": 0.025, "kv_landing": 0.006})
    emulated["ttft_to_client_s"] = -0.001  # the emulated hop faster than the twin's
    fit = fit_host_costs(emulated, virtual, "test")
    assert fit.request_in_s == pytest.approx(0.002)
    assert fit.route_s == pytest.approx(0.015)
    assert fit.landing_s == pytest.approx(0.005)
    assert fit.to_client_s == 0.0
    assert fit.requests == 200
    # a refit adds the residual to what the twin already carried
    again = fit_host_costs(emulated, virtual, "test", start=HostCosts(route_s=0.010))
    assert again.route_s == pytest.approx(0.025)


def test_wan_transfers_count_for_sending_and_landing_only_without_a_fitted_link() -> None:
    """Over a calibrated WAN a transfer's residual is the link model's; over the
    configured one (the main job's check) it is this host's emulated line and servers',
    and a deployment whose every transfer crosses the WAN (cross-dc-pd) is fitted on it."""
    virtual = records(100, {"kv_transfer": 0.300, "kv_landing": 0.010})
    emulated = records(100, {"kv_transfer": 0.323, "kv_landing": 0.030, "router_queue": 0.02})
    virtual["kv_path"] = emulated["kv_path"] = "wan"
    linked = fit_host_costs(emulated, virtual, "t")
    assert (linked.send_s, linked.landing_s) == (0.0, 0.0)  # no in-DC transfer: unfitted
    assert linked.route_s == pytest.approx(0.02)
    configured = fit_host_costs(emulated, virtual, "t", wan=True)
    assert configured.send_s == pytest.approx(0.023)
    assert configured.landing_s == pytest.approx(0.020)
    assert configured.route_s == pytest.approx(0.02) and configured.requests == 100


def test_fit_uses_medians_so_a_busy_hosts_stalls_do_not_become_cost() -> None:
    virtual = records(400, {})
    emulated = records(400, {"router_queue": 0.004})
    emulated.loc[:20, "ttft_router_queue_s"] = 2.0  # 5 % of requests stalled by the host
    assert fit_host_costs(emulated, virtual, "t").route_s == pytest.approx(0.004)


def test_twin_adds_each_hop_where_it_happens() -> None:
    sc = load_scenario("same-dc-pd").model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    [bare] = run_twin(dep, net, plan(1, 1), hashes_for(dep.block_size))
    host = HostCosts(
        request_in_s=0.001, route_s=0.002, to_client_s=0.004, landing_s=0.008, send_s=0.016
    )
    [hosted] = run_twin(dep, net, plan(1, 1), hashes_for(dep.block_size), host=host)
    assert hosted.ttft_to_router_s == pytest.approx(bare.ttft_to_router_s + 0.001)
    assert hosted.ttft_kv_landing_s == pytest.approx(bare.ttft_kv_landing_s + 0.008)
    assert hosted.ttft_to_client_s == pytest.approx(bare.ttft_to_client_s + 0.004)
    # route_s delays routing; in PD the router routes once D's admission is back
    assert hosted.ttft_router_queue_s == pytest.approx(bare.ttft_router_queue_s + 0.002)
    assert hosted.ttft_kv_transfer_s == pytest.approx(bare.ttft_kv_transfer_s + 0.016)
    assert hosted.ttft_s == pytest.approx(bare.ttft_s + 0.031)
    assert hosted.tpot_s == pytest.approx(bare.tpot_s)
