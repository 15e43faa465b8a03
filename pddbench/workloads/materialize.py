"""Prompt materialisation: block hashes → deterministic token IDs.

A trace carries only block hashes; a real server needs token IDs whose prefix structure
is exactly the trace's, so that its radix cache sees the same hits. Each block hash maps
to one block of ``block_size`` token IDs:

* **injective**: the first ``k`` tokens of a block spell the 64-bit hash in base ``V``
  (``V`` = number of usable token IDs, ``V**k >= 2**64``), so different hashes never give
  equal full blocks (nor equal prefixes of ``k`` or more tokens);
* **deterministic across processes and machines**: the rest of the block comes from a
  SplitMix64 stream seeded by the hash (no Python ``hash()``, no global RNG);
* **lazy**: a prompt is produced from its own hashes only; nothing about the rest of the
  trace is materialised.

A partial last block (``input_length`` not a multiple of ``block_size``) takes the first
tokens of its block; partial blocks shorter than ``k`` tokens are only distinct up to
their length (real engines never reuse a partial block, so this does not matter for
cache behaviour). When a trace lists only full blocks, the trailing tokens are derived
from the request's own id so different requests still differ there.

Token IDs are drawn from ``[first_id, vocab_size)``, leaving low IDs (special tokens of
real tokenizers) unused.

**Namespaces** (:func:`namespaced`): a replay may play several stretches of a trace at
once, each in its own prompt namespace (a steady-state ladder point's slices), so that no
stretch's prompts share a cache block with another's: namespace ``n > 0`` maps every hash
through SplitMix64 keyed by ``n`` (equal hashes stay equal, chained prefixes stay
chained); namespace 0 is the trace's own hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser applied elementwise to a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
    return z


def namespaced(hashes: Sequence[int] | np.ndarray, namespace: int) -> np.ndarray:
    """The block hashes of prompt namespace ``namespace`` (0: the hashes as they are)."""
    h = np.asarray(hashes, dtype=np.uint64)
    if namespace == 0:
        return h
    with np.errstate(over="ignore"):
        key = splitmix64(np.array([namespace], dtype=np.uint64) * _GOLDEN)[0]
        return splitmix64(h ^ key)


def stable_hash64(text: str) -> int:
    """A 64-bit hash of a string that is the same in every process (blake2b)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class Materializer:
    """Maps block hashes to token-ID blocks for one vocabulary and block size."""

    block_size: int
    vocab_size: int = 32000
    first_id: int = 1000

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError("block_size must be positive")
        if self.vocab_size - self.first_id < 2:
            raise ValueError("vocab_size must exceed first_id by at least 2")
        if self.block_size < self.digits:
            raise ValueError(
                f"block_size {self.block_size} is shorter than the {self.digits} tokens needed "
                f"to encode a 64-bit hash with {self.usable} usable token ids"
            )

    @property
    def usable(self) -> int:
        """Number of token IDs a block may use."""
        return self.vocab_size - self.first_id

    @cached_property
    def digits(self) -> int:
        """Tokens needed to spell a 64-bit hash in base ``usable``."""
        k, reach = 0, 1
        while reach < 2**64:
            reach *= self.usable
            k += 1
        return k

    def blocks(self, hashes: Sequence[int] | np.ndarray) -> np.ndarray:
        """Token IDs of full blocks, shape ``(len(hashes), block_size)``, dtype int64."""
        h = np.asarray(hashes, dtype=np.uint64).reshape(-1)
        out = np.empty((h.size, self.block_size), dtype=np.uint64)
        base = np.uint64(self.usable)
        rest = h.copy()
        for d in range(self.digits):  # injective prefix: base-V digits of the hash
            out[:, d] = rest % base
            rest //= base
        tail = self.block_size - self.digits
        if tail:
            with np.errstate(over="ignore"):
                counters = h[:, None] * _GOLDEN + np.arange(1, tail + 1, dtype=np.uint64)[None, :]
            out[:, self.digits :] = splitmix64(counters) % base
        return (out + np.uint64(self.first_id)).astype(np.int64)

    def prompt(
        self, hashes: Sequence[int] | np.ndarray, input_length: int, *, request_id: str = ""
    ) -> list[int]:
        """The token IDs of one prompt of ``input_length`` tokens from its block hashes.

        Uses as many hashes as the prompt has (full or partial) blocks; tokens past the
        listed blocks are filled deterministically from ``request_id``.
        """
        if input_length < 0:
            raise ValueError("input_length must be >= 0")
        needed_blocks = -(-input_length // self.block_size)
        h = np.asarray(hashes, dtype=np.uint64)[:needed_blocks]
        tokens = self.blocks(h).reshape(-1)[:input_length]
        missing = input_length - tokens.size
        if missing > 0:
            seed = np.uint64(stable_hash64(f"pddbench-tail:{request_id}"))
            with np.errstate(over="ignore"):
                counters = seed * _GOLDEN + np.arange(1, missing + 1, dtype=np.uint64)
            fill = (splitmix64(counters) % np.uint64(self.usable)).astype(np.int64) + self.first_id
            tokens = np.concatenate([tokens, fill])
        return tokens.tolist()
