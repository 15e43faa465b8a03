"""Speculative decoding (MTP / EAGLE-style draft + verify) of the reference servers (sans-IO).

Owns how many tokens one decode step of a sequence emits. With ``draft_tokens = d > 1`` each
decode step verifies ``d`` tokens per sequence (the token being decoded plus ``d - 1``
drafts; SGLang's ``--speculative-num-draft-tokens``), priced as an extend of ``d`` tokens on
top of the sequence's context (as :func:`pddbench.servers.calibration.shape_for` prices the
MTP calibration points), and emits ``1 + a`` tokens where ``a`` is the number of drafts
accepted *consecutively*: draft ``j`` (1-based) survives with probability
``acceptance ** j``, so the expected accept length is
``1 + acceptance + ... + acceptance ** (d - 1)`` (:func:`expected_accept_len`).

The draw is deterministic per request: the request's key ``k = blake2b(f"mtp|{seed}|{rid}")``
(64 bits, :func:`draw_key`, worked out once per request) and, per step, the splitmix64
output ``mix(k + position * 0x9E3779B97F4A7C15 mod 2**64)`` read as a uniform ``u`` in
[0, 1), ``position`` the first output position the step produces,
``a = #{j in 1..d-1 : u < acceptance ** j}``. A step is therefore the same on
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


def draw_key(seed: int, rid: str) -> int:
    """The 64-bit key of one request's draws (the run ``seed`` and the request id)."""
    digest = blake2b(f"mtp|{seed}|{rid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def step_tokens(spec: Speculation, key: int, position: int) -> int:
    """Tokens a decode step whose first new token is at ``position`` emits (1 .. d), for the
    request whose :func:`draw_key` is ``key``."""
    if spec.draft_tokens <= 1:
        return 1
    z = (key + position * _GAMMA) & _M64  # splitmix64's state at ``position``, mixed
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    u = (z ^ (z >> 31)) / _TWO64
    n = 1
    p = spec.acceptance
    while n < spec.draft_tokens and u < p:
        n += 1
        p *= spec.acceptance
    return n
