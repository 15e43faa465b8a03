"""Host CPU shares from /proc/stat lines (busy and steal)."""

from __future__ import annotations

import pytest

from pddbench.netem.hostcpu import CpuShare, CpuTimes


def test_shares_between_two_stat_lines() -> None:
    a = CpuTimes.parse("cpu  100 0 50 800 50 0 0 0 0 0")
    b = CpuTimes.parse("cpu  160 0 70 860 60 0 0 50 0 0")
    share = CpuShare.between(a, b)
    # 200 jiffies: 70 idle (60 idle + 10 iowait), 50 stolen
    assert share.busy_pct == pytest.approx(65.0)
    assert share.steal_pct == pytest.approx(25.0)


def test_unreadable_or_empty_intervals_give_zero() -> None:
    a = CpuTimes.parse("cpu  1 2 3 4")  # old kernels: fewer fields
    assert a.steal == 0 and a.total == 10
    assert CpuShare.between(None, a) == CpuShare(0.0, 0.0)
    assert CpuShare.between(a, a) == CpuShare(0.0, 0.0)
    with pytest.raises(ValueError):
        CpuTimes.parse("intr 1 2 3")


def test_this_machine_reads() -> None:
    now = CpuTimes.now()
    assert now is not None and now.total > 0 and 0 <= now.steal <= now.total
