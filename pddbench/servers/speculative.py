"""Speculative decoding (MTP / EAGLE-style draft + verify) of the reference servers (sans-IO).

Owns how many tokens one decode step of a sequence emits. With ``draft_tokens = d > 1`` each
decode step verifies ``d`` tokens per sequence (the token being decoded plus ``d - 1``
drafts; SGLang's ``--speculative-num-draft-tokens``), priced as an extend of ``d`` tokens on
top of the sequence's context (as :func:`pddbench.servers.calibration.shape_for` prices the
MTP calibration points), and emits ``1 + a`` tokens where ``a`` is the number of drafts
accepted *consecutively*: draft ``j`` (1-based) survives with probability
``acceptance ** j``, so the expected accept length is
``1 + acceptance + ... + acceptance ** (d - 1)`` (:func:`expected_accept_len`).

The draw is deterministic per request: one ``blake2b(f"mtp|{seed}|{rid}|{position}")``
value read as a uniform ``u`` in [0, 1), ``position`` the first output position the step
produces, ``a = #{j in 1..d-1 : u < acceptance ** j}``. A step is therefore the same on
whichever instance (RelayDecode or MainDecode) runs it, and a run repeats exactly. The caller
caps the step at the request's remaining output tokens. The drafter's own forward pass (one
MTP layer) is not priced, as in the calibration. ``d = 1`` is plain decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b

_TWO64 = float(2**64)


@dataclass(frozen=True)
class Speculation:
    draft_tokens: int = 1  # tokens verified per sequence per step (1 = off)
    acceptance: float = 0.0  # probability that each draft token is accepted

    def __post_init__(self) -> None:
        if self.draft_tokens < 1:
            raise ValueError(f"draft_tokens must be >= 1, got {self.draft_tokens}")
        if not 0.0 <= self.acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {self.acceptance}")

    @property
    def enabled(self) -> bool:
        return self.draft_tokens > 1


OFF = Speculation()


def expected_accept_len(spec: Speculation) -> float:
    """Mean tokens one step emits (before the cap at the request's end)."""
    return sum(spec.acceptance**j for j in range(spec.draft_tokens))


def step_tokens(spec: Speculation, seed: int, rid: str, position: int) -> int:
    """Tokens a decode step whose first new token is at ``position`` emits (1 .. d)."""
    if spec.draft_tokens <= 1:
        return 1
    digest = blake2b(f"mtp|{seed}|{rid}|{position}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "little") / _TWO64
    n = 1
    p = spec.acceptance
    while n < spec.draft_tokens and u < p:
        n += 1
        p *= spec.acceptance
    return n
