"""The automatic emulation scale: the smallest step each backend and veth sustain."""

from __future__ import annotations

from pddbench.netem.scale import choose_scale
from pddbench.netem.tcp import tcp_sysctls


def test_the_smallest_step_that_fits_the_backend_and_veth() -> None:
    assert choose_scale([10_000.0], [], "nfqueue").scale == 10  # 1 Gbit/s sustained
    assert choose_scale([10_000.0], [], "kernel").scale == 2  # 5 Gbit/s sustained
    assert choose_scale([10_000.0], [400_000.0], "kernel").scale == 20  # veth ~20 Gbit/s
    assert choose_scale([800.0], [], "nfqueue").scale == 1
    assert choose_scale([], [], "nfqueue").scale == 1


def test_the_reason_names_both_limits() -> None:
    reason = choose_scale([10_000.0], [400_000.0], "nfqueue").reason
    assert reason.startswith("auto: 1/20") and "nfqueue backend sustains 1000" in reason
    assert "segment 400000 Mbit/s" in reason


def test_slow_start_after_idle_is_a_namespace_setting() -> None:
    assert tcp_sysctls(1 << 26, router=False)["net.ipv4.tcp_slow_start_after_idle"] == "0"
    on = tcp_sysctls(1 << 26, router=False, slow_start_after_idle=True)
    assert on["net.ipv4.tcp_slow_start_after_idle"] == "1"


def test_auto_congestion_is_bbr_where_the_kernel_has_it_and_a_name_is_itself() -> None:
    from pathlib import Path

    from pddbench.netem.tcp import resolve_congestion

    assert resolve_congestion("cubic") == "cubic"
    assert resolve_congestion("reno") == "reno"
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if "bbr" in available:  # loaded here (this kernel has it); else auto may still load it
        assert resolve_congestion("auto") == "bbr"
    assert resolve_congestion("auto") in ("bbr", "cubic")


def test_a_scenario_network_asks_for_auto_congestion_by_default() -> None:
    from pddbench.netem.topology_config import NetworkConfig

    net = NetworkConfig.model_validate({"sites": [{"name": "dc-a"}]})
    assert net.tcp_congestion == "auto"
