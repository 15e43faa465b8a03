"""Traffic-control requests (HTB, netem encoding through pyroute2) and the backend choice."""

from __future__ import annotations

import errno

import pytest
from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import percent2u32, time2tick

from pddbench.errors import UserError
from pddbench.netem.backend import Capabilities, choose_backend, describe_netem_error
from pddbench.netem.shaping import (
    HTB_CLASS,
    MIN_BURST_BYTES,
    bdp_packets,
    delay_line_limit_pkts,
    htb_burst_bytes,
    htb_requests,
    leaf_request,
    netem_kwargs,
    shaping_requests,
)
from pddbench.netem.topology_config import Shape

NETEM = Capabilities(netem=True, netem_probe="netem qdisc available")
NO_NETEM = Capabilities(netem=False, netem_probe=describe_netem_error(errno.ENOENT, ""))


def encode_netem(kwargs: dict) -> dict:
    """Encode the netem options as pyroute2 sends them, then decode the bytes again."""
    opts = plugins["netem"].get_parameters(dict(kwargs))
    msg = tcmsg()
    msg["attrs"] = [["TCA_KIND", "netem"], ["TCA_OPTIONS", opts]]
    msg.encode()
    decoded = tcmsg(msg.data)
    decoded.decode()
    return decoded.get_attr("TCA_OPTIONS")


def test_htb_burst_is_about_one_millisecond_and_at_least_one_gso_packet() -> None:
    assert htb_burst_bytes(100) == MIN_BURST_BYTES
    assert htb_burst_bytes(10_000) == 10_000 * 1_000_000 // 8 // 1000
    root, klass = htb_requests(Shape(rate_mbit=5000))
    assert root.kind == klass.kind == "htb"
    assert klass.kwargs["rate"] == klass.kwargs["ceil"] == 625_000_000  # bytes/s
    assert klass.kwargs["burst"] == klass.kwargs["cburst"] == 625_000


def test_netem_request_fields_in_microseconds_percent_and_packets() -> None:
    shape = Shape(rate_mbit=1000, delay_ms=30, jitter_ms=3, loss_pct=1.5)
    kwargs = netem_kwargs(shape)
    assert (kwargs["delay"], kwargs["jitter"], kwargs["loss"]) == (30_000, 3_000, 1.5)
    assert kwargs["parent"] == HTB_CLASS
    assert kwargs["limit"] >= 2 * bdp_packets(1000, 30)
    wire = encode_netem(kwargs)
    assert wire["delay"] == int(time2tick(30_000))
    assert wire["jitter"] == int(time2tick(3_000))
    assert wire["loss"] == percent2u32(1.5)
    assert wire["limit"] == kwargs["limit"]
    # jitter comes with a netem rate, which keeps packets in order
    assert wire.get_attr("TCA_NETEM_RATE")["rate"] == 125_000_000


def test_netem_without_jitter_has_no_rate_and_down_means_total_loss() -> None:
    kwargs = netem_kwargs(Shape(rate_mbit=200, delay_ms=5))
    assert "rate" not in kwargs
    assert encode_netem(kwargs).get_attr("TCA_NETEM_RATE") is None
    assert netem_kwargs(Shape(delay_ms=5), down=True)["loss"] == 100.0


def test_netem_limit_covers_ten_gigabit_at_thirty_ms() -> None:
    shape = Shape(rate_mbit=10_000, delay_ms=30)
    assert netem_kwargs(shape)["limit"] >= 2 * bdp_packets(10_000, 30) > 1000
    assert delay_line_limit_pkts(shape) == netem_kwargs(shape)["limit"]


def test_normal_jitter_cannot_be_encoded_for_netem() -> None:
    with pytest.raises(ValueError, match="distribution"):
        netem_kwargs(Shape(delay_ms=5, jitter_ms=1, jitter_dist="normal"))


def test_leaf_is_netem_for_kernel_and_a_bottleneck_fifo_otherwise() -> None:
    shape = Shape(rate_mbit=1000, delay_ms=10, limit_pkts=321)
    assert leaf_request("kernel", shape).kind == "netem"
    fifo = leaf_request("nfqueue", shape)
    assert (fifo.kind, fifo.kwargs["parent"]) == ("bfifo", HTB_CLASS)
    assert fifo.kwargs["limit"] == 321 * 1500  # configured packets, held as bytes
    assert [r.kind for r in shaping_requests("nfqueue", shape)] == ["htb", "htb", "bfifo"]


def test_default_bottleneck_queue_is_about_one_bdp_in_bytes() -> None:
    # a 10 Gbit/s line scaled by 1000: 10 Mbit/s, 2 x 15 ms one way
    shape = Shape(rate_mbit=10, delay_ms=15)
    limit = leaf_request("nfqueue", shape).kwargs["limit"]
    queueing_ms = limit * 8 / (10e6) * 1000
    assert limit >= 2 * 65536 and queueing_ms < 150  # not seconds of bufferbloat


def test_backend_kernel_when_netem_exists_and_shape_fits() -> None:
    assert choose_backend("auto", NETEM, Shape(delay_ms=5, jitter_ms=1))[0] == "kernel"


def test_backend_falls_back_when_the_netem_probe_fails() -> None:
    backend, reason = choose_backend("auto", NO_NETEM, Shape(delay_ms=5))
    assert backend == "nfqueue" and "ENOENT" in reason


def test_backend_falls_back_for_normal_jitter_even_with_netem() -> None:
    backend, reason = choose_backend("auto", NETEM, Shape(jitter_ms=2, jitter_dist="normal"))
    assert backend == "nfqueue" and "normal jitter" in reason


def test_backend_errors_name_the_remedy() -> None:
    with pytest.raises(UserError, match="linux-modules-extra"):
        choose_backend("kernel", NO_NETEM, Shape())
    with pytest.raises(UserError, match="NFQUEUE target"):
        choose_backend("auto", Capabilities(False, "x", False, "no nf_tables"), Shape())
    with pytest.raises(UserError, match="distribution table"):
        choose_backend("kernel", NETEM, Shape(jitter_ms=1, jitter_dist="normal"))


def test_probe_error_text() -> None:
    assert "ENOENT" in describe_netem_error(errno.ENOENT, "No such file or directory")
    assert "EPERM" not in describe_netem_error(errno.EPERM, "Operation not permitted")


def test_runtime_change_requests_for_the_kernel_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """The netem path cannot run on this kernel: check what it would send (no kernel call)."""
    from pddbench.netem import links
    from pddbench.netem.plan import plan_topology
    from pddbench.netem.topology_config import NetworkConfig

    sent: list[tuple[str, str, list]] = []
    monkeypatch.setattr(links, "apply_tc", lambda ns, ifname, reqs: sent.append((ns, ifname, reqs)))
    config = NetworkConfig.model_validate(
        {
            "sites": [{"name": "a"}, {"name": "b"}],
            "links": [{"a": "a", "b": "b", "rate_mbit": 1000, "delay_ms": 30}],
        }
    )
    plan = plan_topology(config, "k1")
    direction = links.ShapedDirection(plan.wans[0].a_to_b, "kernel", "netem qdisc available")
    assert direction.start_daemon() is None  # no userspace stage with netem
    direction.install()
    ns, ifname, reqs = sent[-1]
    assert (ns, ifname) == ("pddbk1-s-a", "pddbk1w0a")
    # a WAN link defaults to two traffic classes, each with its own netem
    assert [r.kind for r in reqs] == ["htb", "htb", "htb", "htb", "netem", "netem", "u32"]
    assert [r.kwargs["delay"] for r in reqs[4:6]] == [30_000, 30_000]

    direction.apply(direction.shape.model_copy(update={"rate_mbit": 100, "delay_ms": 40}), False)
    change = sent[-1][2]
    assert [r.command for r in change] == ["change-class"] * 3 + ["change"] * 2
    assert change[0].kwargs["rate"] == change[0].kwargs["ceil"] == 12_500_000
    assert {r.kind for r in change[3:]} == {"netem"}
    assert all(r.kwargs["delay"] == 40_000 and r.kwargs["loss"] == 0 for r in change[3:])
    direction.apply(direction.shape, True)  # link down: netem drops everything
    assert [r.kwargs["loss"] for r in sent[-1][2]] == [100.0, 100.0]
    with pytest.raises(ValueError, match="qos"):
        direction.apply(direction.shape.model_copy(update={"qos": "fifo"}), False)


def test_priority_layout_guarantees_control_and_filters_bulk_by_dscp() -> None:
    from pddbench.netem.qos import BULK_TOS
    from pddbench.netem.shaping import CONTROL_SHARE, HTB_BULK, HTB_LINK, LEAF_BULK

    shape = Shape(rate_mbit=1000, delay_ms=15, qos="priority")
    reqs = shaping_requests("nfqueue", shape)
    root, link, control, bulk, leaf_c, leaf_b, filt = reqs
    assert root.kwargs["default"] == 0x10  # unmarked traffic is control traffic
    assert (link.handle, control.kwargs["parent"], bulk.kwargs["parent"]) == (
        HTB_LINK,
        HTB_LINK,
        HTB_LINK,
    )
    assert control.kwargs["prio"] < bulk.kwargs["prio"]
    full = 125_000_000
    assert control.kwargs["rate"] == int(full * CONTROL_SHARE)
    assert control.kwargs["rate"] + bulk.kwargs["rate"] == full
    assert control.kwargs["ceil"] == bulk.kwargs["ceil"] == link.kwargs["rate"] == full
    assert (leaf_c.kind, leaf_b.kind, leaf_b.handle) == ("bfifo", "bfifo", LEAF_BULK)
    assert filt.kwargs["target"] == HTB_BULK
    assert filt.kwargs["keys"] == [f"{BULK_TOS:#04x}/0xfc+1"]
    # one FIFO when asked for, and on intra-site segments (Shape's default)
    assert [r.kind for r in shaping_requests("nfqueue", Shape(rate_mbit=1000))] == [
        "htb",
        "htb",
        "bfifo",
    ]
