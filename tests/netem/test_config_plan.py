"""Topology configuration validation and the pure plan (names, addresses, routes, scale)."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from pddbench.errors import UserError
from pddbench.harness.cli.netem_network import load_network_config, network_from_mapping
from pddbench.netem.plan import EMULATED_NET, check_run_id, plan_topology
from pddbench.netem.topology_config import NetworkConfig


def two_sites(**link: object) -> NetworkConfig:
    return NetworkConfig.model_validate(
        {
            "sites": [
                {"name": "dc-a", "instances": ["prefill-0", "prefill-1"]},
                {"name": "dc-b", "instances": ["decode-0"]},
            ],
            "links": [{"a": "dc-a", "b": "dc-b", "rate_mbit": 1000, "delay_ms": 30, **link}],
        }
    )


def triangle() -> NetworkConfig:
    return NetworkConfig.model_validate(
        {
            "sites": [
                {"name": "a", "instances": ["ia"]},
                {"name": "b", "instances": ["ib"]},
                {"name": "c", "instances": ["ic"]},
            ],
            "links": [
                {"a": "a", "b": "b", "delay_ms": 5},
                {"a": "b", "b": "c", "delay_ms": 5},
                {"a": "a", "b": "c", "delay_ms": 30},
            ],
            "clients": [{"name": "load", "site": "c"}],
        }
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sites": []}, "at least 1"),
        ({"sites": [{"name": "a"}, {"name": "a"}]}, "duplicate site"),
        (
            {
                "sites": [{"name": "a", "instances": ["x"]}, {"name": "b", "instances": ["x"]}],
                "links": [{"a": "a", "b": "b"}],
            },
            "duplicate instance",
        ),
        ({"sites": [{"name": "a"}], "links": [{"a": "a", "b": "z"}]}, "unknown site 'z'"),
        ({"sites": [{"name": "a"}], "links": [{"a": "a", "b": "a"}]}, "to itself"),
        (
            {
                "sites": [{"name": "a"}, {"name": "b"}],
                "links": [{"a": "a", "b": "b"}, {"a": "b", "b": "a"}],
            },
            "linked twice",
        ),
        ({"sites": [{"name": "a"}, {"name": "b"}]}, "not connected"),
        ({"sites": [{"name": "bad name"}]}, "must be 1-40 characters"),
        ({"sites": [{"name": "a"}], "clients": [{"site": "q"}]}, "unknown site 'q'"),
        ({"sites": [{"name": "a"}], "scale": 0}, "greater than 0"),
        ({"sites": [{"name": "a"}], "typo": 1}, "Extra inputs"),
    ],
)
def test_invalid_configs_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        NetworkConfig.model_validate(data)


def test_per_direction_override_inherits_unset_fields() -> None:
    cfg = two_sites(jitter_ms=2, b_to_a={"delay_ms": 10, "loss_pct": 1})
    link = cfg.links[0]
    fwd, back = link.shape("a_to_b"), link.shape("b_to_a")
    assert (fwd.delay_ms, fwd.loss_pct, fwd.jitter_ms) == (30, 0, 2)
    assert (back.delay_ms, back.loss_pct, back.jitter_ms, back.rate_mbit) == (10, 1, 2, 1000)


def test_plan_names_fit_the_kernel_and_carry_the_prefix() -> None:
    plan = plan_topology(triangle(), "ab12cd")
    for ns in plan.namespaces():
        assert ns.startswith("pddbab12cd-")
    ifnames = [h.ifname for h in plan.hosts] + [h.port_ifname for h in plan.hosts]
    ifnames += [s.bridge for s in plan.switches]
    ifnames += [n for w in plan.wans for n in (w.a_ifname, w.b_ifname)]
    assert all(n.startswith("pddbab12cd") and len(n) <= 15 for n in ifnames)
    assert len(set(plan.namespaces())) == len(plan.namespaces())


def test_plan_addresses_are_unique_and_inside_the_benchmark_block() -> None:
    plan = plan_topology(triangle(), "x1")
    addresses = [h.address for h in plan.hosts] + [s.address for s in plan.switches]
    addresses += [a for w in plan.wans for a in (w.a_address, w.b_address)]
    assert len(set(addresses)) == len(addresses)
    assert all(ipaddress.ip_address(a) in EMULATED_NET for a in addresses)
    for h in plan.hosts:
        assert ipaddress.ip_address(h.gateway) in ipaddress.ip_network(f"{h.address}/24", False)


def test_routes_follow_the_least_delay_path_and_probe_hosts_use_direct_links() -> None:
    plan = plan_topology(triangle(), "x1")
    a = plan.switch("a")
    wan_ab, wan_ac = plan.wan("a-b"), plan.wan("a-c")
    routes = {r.dst: r.gateway for r in a.routes}
    c_subnet = plan.switch("c").subnet
    assert routes[c_subnet] == wan_ab.b_address  # 5 + 5 ms via b beats 30 ms direct
    assert routes[f"{plan.probe_host('c').address}/32"] == wan_ac.b_address


def test_default_client_and_hidden_probe_hosts() -> None:
    plan = plan_topology(two_sites(), "x1")
    kinds = {h.name: h.kind for h in plan.hosts}
    assert kinds["client"] == "client"
    assert sorted(k for k in kinds.values() if k == "probe") == ["probe", "probe"]
    with pytest.raises(UserError, match="unknown instance"):
        plan.host("nope")


def test_scale_divides_rates_but_keeps_delays() -> None:
    cfg = two_sites().model_copy(update={"scale": 20.0})
    plan = plan_topology(cfg, "x1")
    d = plan.wans[0].a_to_b
    assert d.configured.rate_mbit == 1000 and d.shape.rate_mbit == 50
    assert d.shape.delay_ms == d.configured.delay_ms == 30
    assert plan.scale == 20.0


def test_queue_numbers_are_unique_per_switch() -> None:
    plan = plan_topology(triangle(), "x1")
    seen: dict[str, set[int]] = {}
    for d in plan.directions():
        assert d.queue_num not in seen.setdefault(d.netns, set())
        seen[d.netns].add(d.queue_num)


@pytest.mark.parametrize("bad", ["", "ABC", "toolong7", "a-b"])
def test_run_id_is_checked(bad: str) -> None:
    with pytest.raises(UserError):
        check_run_id(bad)


def test_scenario_file_network_table(tmp_path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[network]\nscale = 10\n[[network.sites]]\nname = "a"\ninstances = ["p"]\n'
        '[[network.sites]]\nname = "b"\n[[network.links]]\na = "a"\nb = "b"\ndelay_ms = 5\n'
    )
    cfg = load_network_config(path)
    assert cfg.scale == 10 and cfg.links[0].delay_ms == 5
    (tmp_path / "bad.toml").write_text("[network]\nsites = []\n")
    with pytest.raises(UserError, match=r"\[network\] sites"):
        load_network_config(tmp_path / "bad.toml")
    with pytest.raises(UserError, match="No such file"):
        load_network_config(tmp_path / "missing.toml")
    (tmp_path / "none.toml").write_text("[other]\nx = 1\n")
    with pytest.raises(UserError, match=r"no \[network\] table"):
        load_network_config(tmp_path / "none.toml")
    assert network_from_mapping({"sites": [{"name": "a"}]}).sites[0].name == "a"


def test_built_in_scenario_names_give_the_network_replay_gets() -> None:
    from pddbench.harness.config.scenario import load_scenario
    from pddbench.netem.backend import backend_here

    cfg = load_network_config("pdd")
    assert cfg == load_scenario("pdd").resolved(backend_here()).network_config()
    # auto for the built-ins' 100 Gbit/s WAN and 400 Gbit/s segments
    assert cfg.scale == {"nfqueue": 100.0, "kernel": 20.0}[backend_here()]
    assert [s.name for s in cfg.sites] == ["dc-a", "dc-b"] and cfg.links[0].name == "wan"
    with pytest.raises(UserError, match=r"unknown scenario 'nope' .*built-in: .*pdd"):
        load_network_config("nope")


def test_a_full_scenario_file_is_validated_as_replay_validates_it(tmp_path) -> None:
    from pddbench.harness.config.scenario import scenario_text

    text, _ = scenario_text("pdd")
    bad = tmp_path / "bad-pdd.toml"
    bad.write_text(text.replace("delay_ms = 15.0", "delay_ms = -1.0"))
    with pytest.raises(UserError, match=r"invalid scenario: .*network.links\[0\].delay_ms"):
        load_network_config(bad)
