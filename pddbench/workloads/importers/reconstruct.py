"""Session reconstruction from global, position-chained block hashes (pure, sans-IO).

Traces such as Mooncake's list each request's block hashes but no session ids. Chat
turns re-send the whole history, so a later turn's prompt starts with every *full*
block of the earlier turn. This module links requests into sessions by that rule:

* **Continuation.** Request B continues request A when A arrived earlier (earlier in
  arrival order; equal arrivals keep file order), B is longer (``input_B > input_A``)
  and A's full blocks (``floor(input_A / block_size)`` hashes) are a prefix of B's hash
  list, with at least ``min_match_blocks`` of them.
* **Choice.** Among candidates B takes the *deepest* (longest matched prefix); among
  equally deep ones the *latest*. Hashes are position-chained, so the hash of A's last
  full block identifies A's whole full prefix: a dict ``(full count, last full hash) ->
  latest such request`` and a walk over B's blocks from deepest to shallowest finds the
  match in O(blocks of B). If the latest request with that prefix is not shorter than B,
  the walk moves to a shallower prefix (B is then a sibling of that request, not its child).
* **Why ``min_match_blocks`` (default 2).** In Mooncake every request starts with the same
  block 0 (a shared system prompt); a one-block match says nothing about a conversation
  and would chain almost everything together.
* **One child per request; forks branch.** A session is a chain (turn k+1 continues turn
  k). The first request that continues A extends A's session (``turn = A.turn + 1``).
  A later request B2 whose deepest match is again A (an edited or regenerated message) is
  a *fork*: it starts a new session at turn 0 with ``parent_request_id = A`` and
  ``parent_session_id`` = A's session, the same shape as a sub-agent spawn. Requests that
  continue B2 follow it into the branch.

Limits: two unrelated requests that share a template of ``min_match_blocks`` or more
blocks, where the earlier one is nothing but that template, are linked; a turn whose
predecessor had fewer than ``min_match_blocks`` full blocks (a very short first turn)
starts its own session; a conversation whose history was edited before an earlier turn
links to the deepest earlier request that is still a prefix (or to none). The arrival of
A's *completion* is unknown, so no think time is derived here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SessionLinks:
    """Per-request session structure, aligned with the input order (``-1`` = none)."""

    parent: np.ndarray  # int64: row of the request this one continues
    session_root: np.ndarray  # int64: row of the first request of this one's session
    turn: np.ndarray  # int32: turn index within the session
    parent_session_root: np.ndarray  # int64: a fork's first turn: root row of parent's session

    @property
    def num_sessions(self) -> int:
        return int(np.count_nonzero(self.session_root == np.arange(self.session_root.size)))

    @property
    def num_forks(self) -> int:
        return int(np.count_nonzero(self.parent_session_root >= 0))


def link_sessions(
    arrival: Sequence[float] | np.ndarray,
    input_length: Sequence[int] | np.ndarray,
    hash_lists: Sequence[Sequence[int]],
    *,
    block_size: int,
    min_match_blocks: int = 2,
) -> SessionLinks:
    """Reconstruct sessions by prefix continuation; see the module docstring for the rule."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    if min_match_blocks < 1:
        raise ValueError("min_match_blocks must be >= 1")
    n = len(hash_lists)
    lengths = np.asarray(input_length, dtype=np.int64)
    if lengths.size != n or len(arrival) != n:
        raise ValueError("arrival, input_length and hash_lists must have the same length")
    order = np.argsort(np.asarray(arrival, dtype=np.float64), kind="stable").tolist()
    inputs = lengths.tolist()

    match = [-1] * n
    latest: dict[tuple[int, int], int] = {}
    for b in order:
        hashes = hash_lists[b]
        size_b = inputs[b]
        for depth in range(len(hashes), min_match_blocks - 1, -1):
            a = latest.get((depth, hashes[depth - 1]))
            if a is not None and inputs[a] < size_b:
                match[b] = a
                break
        full = min(size_b // block_size, len(hashes))
        if full >= 1:
            latest[(full, hashes[full - 1])] = b
    return chain_sessions(match, order)


def chain_sessions(continues: Sequence[int], order: Sequence[int]) -> SessionLinks:
    """Sessions from explicit links: ``continues[b]`` is the row request ``b`` continues
    (``-1``: none), ``order`` the rows in arrival order (each parent before its children).

    The first child of a request extends its session; a later child is a *fork* that
    starts a branch session (see the module docstring). Used by :func:`link_sessions` and
    by importers whose format names each request's parent (Bailian's ``parent_chat_id``).
    """
    n = len(continues)
    parent = [-1] * n
    root = [-1] * n
    turn = [0] * n
    parent_root = [-1] * n
    has_child = [False] * n
    for b in order:
        match = continues[b]
        if match < 0:
            root[b] = b
        elif not has_child[match]:
            has_child[match] = True
            parent[b] = match
            root[b] = root[match]
            turn[b] = turn[match] + 1
        else:  # a fork: a branch session hanging off the parent's session
            parent[b] = match
            root[b] = b
            parent_root[b] = root[match]
    return SessionLinks(
        parent=np.asarray(parent, dtype=np.int64),
        session_root=np.asarray(root, dtype=np.int64),
        turn=np.asarray(turn, dtype=np.int32),
        parent_session_root=np.asarray(parent_root, dtype=np.int64),
    )


@dataclass(frozen=True)
class Turns:
    """Turn order of requests whose format names their session (aligned with the input)."""

    turn: np.ndarray  # int32: 0-based position in the session, by arrival then file order
    previous: np.ndarray  # int64: row of the session's previous turn (-1 for turn 0)
    order: np.ndarray  # int64: rows sorted by (session, turn)


def turns_by_session(
    session_codes: np.ndarray, arrival: np.ndarray, tiebreak: np.ndarray | None = None
) -> Turns:
    """Number each session's requests by arrival; equal arrivals by ``tiebreak`` (a
    format's own round number, say), then file order."""
    codes = np.asarray(session_codes, dtype=np.int64)
    n = codes.size
    keys = [np.arange(n)] if tiebreak is None else [np.arange(n), np.asarray(tiebreak)]
    order = np.lexsort((*keys, np.asarray(arrival, dtype=np.float64), codes))
    sorted_codes = codes[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = sorted_codes[1:] != sorted_codes[:-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    turn = np.empty(n, dtype=np.int32)
    turn[order] = np.arange(n) - first
    previous = np.full(n, -1, dtype=np.int64)
    if n > 1:
        previous[order[1:][~starts[1:]]] = order[:-1][~starts[1:]]
    return Turns(turn=turn, previous=previous, order=order.astype(np.int64))
