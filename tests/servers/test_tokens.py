"""Deterministic tokens and block hashes: stable across processes, no Python hash()."""

from __future__ import annotations

import subprocess
import sys

from pddbench.servers.tokens import TokenStream, block_hashes, output_token


def test_output_token_is_stable_across_processes() -> None:
    here = [output_token(7, "req-1", i, 1000) for i in range(5)]
    code = (
        "from pddbench.servers.tokens import output_token;"
        "print([output_token(7, 'req-1', i, 1000) for i in range(5)])"
    )
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    ).stdout.strip()
    assert str(here) == there
    assert all(0 <= t < 999 for t in here)  # the EOS id (999) is never drawn


def test_tokens_differ_by_request_seed_and_position() -> None:
    a = [output_token(0, "a", i, 163840) for i in range(50)]
    assert len(set(a)) > 45
    assert a != [output_token(0, "b", i, 163840) for i in range(50)]
    assert a != [output_token(1, "a", i, 163840) for i in range(50)]


def test_eos_is_deterministic_and_rare() -> None:
    s = TokenStream(0, "r", 163840, eos_probability=0.01)
    hits = [i for i in range(5000) if s.is_eos(i)]
    assert 20 < len(hits) < 90
    assert hits == [i for i in range(5000) if TokenStream(0, "r", 163840, 0.01).is_eos(i)]
    assert not any(TokenStream(0, "r", 163840, 0.0).is_eos(i) for i in range(1000))


def test_block_hashes_are_chained_and_full_blocks_only() -> None:
    a = list(range(130))
    b = [*range(64), *range(1000, 1066)]
    ha, hb = block_hashes(a, 64), block_hashes(b, 64)
    assert len(ha) == 2  # the partial third block is not hashed
    assert ha[0] == hb[0] and ha[1] != hb[1]
    c = [*range(64, 128), *range(64)]  # same second block content, different prefix
    assert block_hashes(c, 64)[1] != ha[1]
