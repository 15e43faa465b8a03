"""Prompt materialisation invariants: deterministic, injective, lazy, process-independent."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.workloads.materialize import Materializer

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(U64, min_size=2, max_size=8, unique=True), st.sampled_from([8, 64, 512]))
def test_different_hashes_never_give_equal_blocks(hashes: list[int], block_size: int) -> None:
    blocks = Materializer(block_size=block_size).blocks(hashes)
    assert len({tuple(b) for b in blocks.tolist()}) == len(hashes)


@settings(max_examples=100, deadline=None)
@given(U64, st.sampled_from([8, 64, 512]), st.integers(1000, 200_000))
def test_equal_hashes_equal_blocks_and_range(h: int, block_size: int, vocab: int) -> None:
    m = Materializer(block_size=block_size, vocab_size=vocab, first_id=100)
    a, b = m.blocks([h, h])
    assert np.array_equal(a, b)
    assert a.min() >= 100 and a.max() < vocab


@settings(max_examples=100, deadline=None)
@given(st.lists(U64, min_size=1, max_size=6), st.integers(0, 6 * 64 + 63))
def test_prompt_length_and_shared_prefix(hashes: list[int], length: int) -> None:
    m = Materializer(block_size=64)
    p = m.prompt(hashes, length, request_id="x")
    assert len(p) == length
    # a longer prompt over the same hashes starts with the same tokens (prefix structure kept)
    full_blocks = min(length // 64, len(hashes))
    q = m.prompt(hashes, full_blocks * 64 + 64, request_id="y")
    assert p[: full_blocks * 64] == q[: full_blocks * 64]


def test_identical_across_processes() -> None:
    code = (
        "from pddbench.workloads.materialize import Materializer;"
        "print(sum(Materializer(block_size=512).prompt([1, 2**63, 12345], 1300, request_id='r')))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    m = Materializer(block_size=512)
    assert outs.pop().strip() == str(sum(m.prompt([1, 2**63, 12345], 1300, request_id="r")))


def test_large_prompt_is_lazy_and_fast() -> None:
    m = Materializer(block_size=512)
    p = m.prompt(list(range(256)), 128 * 1024)
    assert len(p) == 128 * 1024


def test_rejects_blocks_too_short_for_injectivity() -> None:
    with pytest.raises(ValueError, match="64-bit hash"):
        Materializer(block_size=2)
