"""Small replay plans and prefix hashes for the twin's tests."""

from __future__ import annotations

from pddbench.harness.plan.player import PlannedRequest


def plan(sessions: int = 6, turns: int = 3, first: int = 8000, step: int = 8000, out: int = 120):
    """Sessions of ``turns`` turns, each turn's prompt extending the previous one."""
    reqs = []
    for s in range(sessions):
        for t in range(turns):
            parent = f"s{s}-t{t - 1}" if t else None
            reqs.append(
                PlannedRequest(
                    f"s{s}-t{t}", f"s{s}", t, 0, parent, s * 0.25, 0.5, first + t * step, out
                )
            )
    return reqs


def hashes_for(block_size: int):
    """A prefix chain per session: turn t's blocks start with turn t-1's."""

    def hashes(req: PlannedRequest) -> list[int]:
        sid = int(req.session_id[1:])
        return [(sid << 32) | j for j in range(req.input_length // block_size)]

    return hashes
