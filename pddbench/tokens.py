"""Deterministic output tokens shared by the reference servers and the client's checks.

The reference servers emit, at output position ``i`` of a request, the token
``output_token(seed, request_id, i)`` whichever instance (RelayDecode or MainDecode)
produces it, so a client can verify that a stream crossing a handoff has no duplicate,
missing or reordered token. Stable across processes and machines (blake2b + SplitMix64,
never Python's ``hash()``). Lives outside ``servers`` and ``harness`` because both use it.
"""

from __future__ import annotations

import numpy as np

from pddbench.workloads.materialize import splitmix64, stable_hash64

DEFAULT_VOCAB = 32000
DEFAULT_FIRST_ID = 1000


def request_key(seed: int, request_id: str) -> int:
    """The 64-bit key from which a request's output tokens are derived."""
    return stable_hash64(f"{seed}:{request_id}")


def output_tokens(
    seed: int,
    request_id: str,
    start: int,
    count: int,
    *,
    vocab_size: int = DEFAULT_VOCAB,
    first_id: int = DEFAULT_FIRST_ID,
) -> list[int]:
    """Tokens at output positions ``start .. start+count-1`` of a request."""
    key = np.uint64(request_key(seed, request_id))
    positions = np.arange(start, start + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = splitmix64(positions * np.uint64(0x9E3779B97F4A7C15) + key)
    usable = np.uint64(vocab_size - first_id)
    return ((mixed % usable).astype(np.int64) + first_id).tolist()


class TokenOracle:
    """Expected token per position for one request (cached in blocks for fast checks)."""

    def __init__(self, seed: int, request_id: str, *, block: int = 256, **vocab: int):
        self._seed = seed
        self._request_id = request_id
        self._block = block
        self._vocab = vocab
        self._cache: dict[int, list[int]] = {}

    def __call__(self, position: int) -> int:
        b = position // self._block
        tokens = self._cache.get(b)
        if tokens is None:
            tokens = output_tokens(
                self._seed, self._request_id, b * self._block, self._block, **self._vocab
            )
            self._cache[b] = tokens
        return tokens[position % self._block]
