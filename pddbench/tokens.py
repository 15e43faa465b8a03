"""Deterministic output tokens shared by the reference servers and the client's checks.

The reference servers emit, at output position ``i`` of a request, the token
``output_token(seed, request_id, i, vocab_size)`` whichever instance (RelayDecode or
MainDecode) produces it, so a client can verify that a stream crossing a handoff has no
duplicate, missing or reordered token::

    output_token(seed, rid, i, V) =
        int.from_bytes(blake2b(f"{seed}|{rid}|{i}".encode(), digest_size=8).digest(),
                       "little") % (V - 1)

The EOS token is ``V - 1`` (never produced by the formula). Position ``i`` ends the
request with EOS (unless ``ignore_eos`` or ``i < min_tokens``) when
``blake2b(f"eos|{seed}|{rid}|{i}")`` read the same way, divided by 2**64, is below the
deployment's ``eos_probability``. Stable across processes and machines (never Python's
``hash()``). Lives outside ``servers`` and ``harness`` because both use it; each response's
``pdd.token_fn`` names the seed and vocabulary size.
"""

from __future__ import annotations

from hashlib import blake2b

_TWO64 = float(2**64)


class TokenStream:
    """The deterministic output of one request."""

    __slots__ = ("_eos_prefix", "_prefix", "eos_probability", "vocab_size")

    def __init__(
        self, seed: int, request_id: str, vocab_size: int, eos_probability: float = 0.0
    ) -> None:
        self._prefix = f"{seed}|{request_id}|".encode()
        self._eos_prefix = f"eos|{seed}|{request_id}|".encode()
        self.vocab_size = vocab_size
        self.eos_probability = eos_probability

    def token(self, position: int) -> int:
        digest = blake2b(self._prefix + str(position).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % (self.vocab_size - 1)

    def __call__(self, position: int) -> int:
        """The expected token at ``position`` (a client's integrity oracle)."""
        return self.token(position)

    @property
    def eos_token(self) -> int:
        return self.vocab_size - 1

    def is_eos(self, position: int) -> bool:
        if self.eos_probability <= 0.0:
            return False
        digest = blake2b(self._eos_prefix + str(position).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") / _TWO64 < self.eos_probability


def output_token(seed: int, request_id: str, position: int, vocab_size: int) -> int:
    return TokenStream(seed, request_id, vocab_size).token(position)


def token_text(token_id: int) -> str:
    """The text a token renders as in ``choices[0].text``."""
    return f" {token_id}"
