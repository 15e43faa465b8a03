"""The RPS mask the emulated namespaces get (the writes themselves are in the root
topology tests)."""

from __future__ import annotations

from pddbench.netem.steering import rps_mask


def test_the_mask_names_every_cpu_in_32_bit_groups() -> None:
    assert rps_mask(1) == "1"
    assert rps_mask(2) == "3"
    assert rps_mask(16) == "ffff"
    assert rps_mask(32) == "ffffffff"
    assert rps_mask(36) == "f,ffffffff"
    assert rps_mask(64) == "ffffffff,ffffffff"
    assert rps_mask(0) == "1"  # at least the CPU it runs on
