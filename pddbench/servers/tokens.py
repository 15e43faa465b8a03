"""Prompt block hashes as the reference servers compute them (pure, stable across processes).

The prompt's token ids are cut into full blocks of ``block_size``; block ``j`` hashes as
``blake2b(h_{j-1} || uint32-le tokens of block j, digest_size=8)`` with ``h_{-1} = b""``.
Equal hash at position j means equal prefix up to block j. The output tokens live in
:mod:`pddbench.tokens` (shared with the client's integrity check).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from hashlib import blake2b

from pddbench.tokens import TokenStream, output_token, token_text

__all__ = ["TokenStream", "block_hashes", "output_token", "token_text"]


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of a prompt (see module docstring).

    Raises ``OverflowError``/``TypeError`` for ids that are not 32-bit unsigned integers.
    """
    ids = token_ids if isinstance(token_ids, array) and token_ids.typecode == "I" else None
    data = (ids if ids is not None else array("I", token_ids)).tobytes()
    step = 4 * block_size
    full = len(token_ids) // block_size
    view = memoryview(data)
    out: list[int] = []
    prev = b""
    for j in range(full):
        prev = blake2b(prev + view[j * step : (j + 1) * step], digest_size=8).digest()
        out.append(int.from_bytes(prev, "little"))
    return out
