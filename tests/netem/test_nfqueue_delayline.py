"""The nfnetlink_queue wire format and the delay line (order, jitter, loss, updates)."""

from __future__ import annotations

import random
import socket
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.netem import nfqueue
from pddbench.netem.delayline import (
    MAX_LEAD_US,
    DelayLine,
    DelaySettings,
    rtt_quantiles_ms,
    stage_lead_us,
)

MS = 1_000_000


def attrs_of(msg: bytes) -> dict[int, bytes]:
    out, pos = {}, 20
    while pos < len(msg):
        length, kind = struct.unpack_from("=HH", msg, pos)
        out[kind] = msg[pos + 4 : pos + length]
        pos += (length + 3) & ~3
    return out


def test_bind_message_asks_meta_copy_gso_and_maxlen() -> None:
    msg = nfqueue.config_bind(7, maxlen=5000)
    length, mtype, flags, _seq, _pid = struct.unpack_from("=IHHII", msg)
    assert length == len(msg)
    assert mtype == (3 << 8) | nfqueue.NFQNL_MSG_CONFIG
    assert flags & nfqueue.NLM_F_ACK
    assert struct.unpack_from("!H", msg, 18)[0] == 7  # res_id, big-endian queue number
    attrs = attrs_of(msg)
    assert attrs[nfqueue.NFQA_CFG_CMD][0] == nfqueue.NFQNL_CFG_CMD_BIND
    assert struct.unpack("!IB", attrs[nfqueue.NFQA_CFG_PARAMS]) == (0, nfqueue.NFQNL_COPY_META)
    assert struct.unpack("!I", attrs[nfqueue.NFQA_CFG_QUEUE_MAXLEN])[0] == 5000
    assert struct.unpack("!I", attrs[nfqueue.NFQA_CFG_FLAGS])[0] == nfqueue.NFQA_CFG_F_GSO


def test_batch_verdict_accepts_up_to_an_id() -> None:
    msg = nfqueue.verdict(3, 12345, True, batch=True)
    assert struct.unpack_from("=H", msg, 4)[0] == (3 << 8) | nfqueue.NFQNL_MSG_VERDICT_BATCH
    hdr = attrs_of(msg)[nfqueue.NFQA_VERDICT_HDR]
    assert struct.unpack("!II", hdr) == (nfqueue.NF_ACCEPT, 12345)
    drop = nfqueue.verdict(3, 9, False, batch=False)
    assert struct.unpack_from("=H", drop, 4)[0] == (3 << 8) | nfqueue.NFQNL_MSG_VERDICT
    assert struct.unpack("!II", attrs_of(drop)[nfqueue.NFQA_VERDICT_HDR]) == (nfqueue.NF_DROP, 9)


def packet_message(packet_id: int) -> bytes:
    hwaddr = struct.pack("=HH", 16, 9) + bytes(12)
    hdr_payload = struct.pack("!IHB", packet_id, 0x0800, 4)
    hdr = struct.pack("=HH", 4 + len(hdr_payload), 1) + hdr_payload + b"\0"
    body = struct.pack("=BBH", socket.AF_INET, 0, socket.htons(0)) + hwaddr + hdr
    return struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body


def test_parse_packets_finds_ids_in_a_batch_of_messages() -> None:
    buf = packet_message(5) + packet_message(6) + packet_message(70000)
    assert list(nfqueue.parse_packets(buf, len(buf))) == [5, 6, 70000]


def test_parse_packets_raises_netlink_errors_but_not_acks() -> None:
    ack = struct.pack("=IHHII", 36, nfqueue.NLMSG_ERROR, 0, 0, 0) + struct.pack("=i", 0) + bytes(16)
    assert list(nfqueue.parse_packets(ack, len(ack))) == []
    err = (
        struct.pack("=IHHII", 36, nfqueue.NLMSG_ERROR, 0, 0, 0) + struct.pack("=i", -1) + bytes(16)
    )
    with pytest.raises(OSError):
        list(nfqueue.parse_packets(err, len(err)))


def test_fixed_delay_releases_in_order_at_due_time() -> None:
    line = DelayLine(DelaySettings(delay_ms=10))
    for i, t in enumerate((0, 1 * MS, 2 * MS)):
        assert line.admit(i, t)
    assert line.next_due_ns() == 10 * MS
    assert line.pop_due(10 * MS - 1) == -1
    assert line.pop_due(11 * MS) == 1
    assert line.pop_due(20 * MS) == 2 and len(line) == 0


def test_lead_releases_early_but_never_before_arrival() -> None:
    line = DelayLine(DelaySettings(delay_ms=1), lead_us=150)
    line.admit(0, 0)
    assert line.next_due_ns() == 850_000
    zero = DelayLine(DelaySettings(delay_ms=0), lead_us=150)
    zero.admit(0, 5)
    assert zero.next_due_ns() == 5


@settings(max_examples=50, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 3 * MS), min_size=1, max_size=200),
    jitter=st.floats(0, 20),
    dist=st.sampled_from(["uniform", "normal"]),
    seed=st.integers(0, 1000),
)
def test_jitter_never_reorders(gaps: list[int], jitter: float, dist: str, seed: int) -> None:
    line = DelayLine(
        DelaySettings(delay_ms=5, jitter_ms=jitter, jitter_dist=dist), random.Random(seed)
    )
    t = 0
    for i, gap in enumerate(gaps):
        t += gap
        line.admit(i, t)
    dues = [due for due, _ in line._held]
    assert dues == sorted(dues)
    assert line.pop_due(10**15) == len(gaps) - 1


def test_uniform_jitter_spread_matches_the_model() -> None:
    line = DelayLine(DelaySettings(delay_ms=15, jitter_ms=3), random.Random(1))
    delays = []
    for i in range(4000):
        now = i * 100 * MS  # sparse: no queueing behind the previous packet
        line.admit(i, now)
        delays.append((line._held[-1][0] - now) / MS)
    d = np.asarray(delays)
    assert d.min() >= 12 and d.max() <= 18
    assert abs(d.std() - 3 / np.sqrt(3)) < 0.1


def test_normal_jitter_uses_sigma() -> None:
    line = DelayLine(
        DelaySettings(delay_ms=30, jitter_ms=3, jitter_dist="normal"), random.Random(2)
    )
    delays = []
    for i in range(4000):
        line.admit(i, i * 100 * MS)
        delays.append((line._held[-1][0] - i * 100 * MS) / MS)
    assert abs(np.std(delays) - 3) < 0.2 and abs(np.median(delays) - 30) < 0.3


def test_loss_rate_and_down() -> None:
    line = DelayLine(DelaySettings(delay_ms=1, loss_pct=10), random.Random(3))
    kept = sum(line.admit(i, i) for i in range(20000))
    assert 0.88 < kept / 20000 < 0.92
    assert line.stats.dropped == 20000 - kept
    line.update(DelaySettings(delay_ms=1, down=True))
    assert not any(line.admit(20000 + i, 10**9) for i in range(100))


def test_update_applies_to_new_packets_and_keeps_order() -> None:
    line = DelayLine(DelaySettings(delay_ms=50))
    line.admit(0, 0)
    line.update(DelaySettings(delay_ms=5))
    line.admit(1, 1 * MS)  # would be due at 6 ms, but may not overtake packet 0
    assert [due for due, _ in line._held] == [50 * MS, 50 * MS]


def test_rtt_model_quantiles() -> None:
    fixed = rtt_quantiles_ms(DelaySettings(delay_ms=15), DelaySettings(delay_ms=15), (0.5, 0.99))
    assert fixed == {0.5: 30.0, 0.99: 30.0}
    jit = rtt_quantiles_ms(
        DelaySettings(delay_ms=15, jitter_ms=3),
        DelaySettings(delay_ms=15, jitter_ms=3),
        (0.5, 0.99),
    )
    # the sum of two U(-3, 3): p99 = 6 - 6 * sqrt(0.02) ≈ 5.15 above the mean
    assert abs(jit[0.5] - 30) < 0.05 and abs(jit[0.99] - (36 - 6 * 0.02**0.5)) < 0.1


def test_stage_lead_is_the_fastest_pass_so_no_packet_is_released_early() -> None:
    near = [0.05, 0.06, 0.05, 0.07] * 15  # host stack, no stage
    far = [10.25, 10.3, 10.28, 10.4] * 15  # two 5 ms stages, ~0.1 ms each at their fastest
    assert stage_lead_us(near, far, configured_ms=10.0, passes=2) == pytest.approx(100.0)
    assert stage_lead_us(near, [9.0] * 60, configured_ms=10.0, passes=2) == 0.0  # never negative
    assert stage_lead_us([], far, configured_ms=10.0, passes=2) == 0.0
    assert stage_lead_us(near, [20.0] * 60, configured_ms=10.0, passes=2) == MAX_LEAD_US


@given(
    near=st.lists(st.floats(0.01, 2.0), min_size=1, max_size=80),
    stage=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=80),
)
def test_no_calibration_pass_would_have_come_out_early(
    near: list[float], stage: list[float]
) -> None:
    # whatever the spread of the stage's cost (a burst of steal on some far samples), the
    # lead leaves every calibration sample at or above the configured delay plus the stack
    far = [min(near) + 10.0 + cost for cost in stage]
    lead_ms = stage_lead_us(near, far, configured_ms=10.0, passes=2) / 1000
    assert all(f - 2 * lead_ms >= 10.0 + min(near) - 1e-9 for f in far)
