"""Priming a deployment's prefix caches with a steady-state point's history, over HTTP.

The emulated driver of :mod:`pddbench.servers.priming` (the twin is the other, in
process): the plan's primed prefixes (:class:`~pddbench.harness.plan.steady.PrimingPlan`)
are materialised exactly as the requests' prompts are (the same tokens for the same
namespaced block hashes) and POSTed to the front door's ``/internal/prime`` in batches,
earliest needed first; the router hashes them as it hashes prompts, places them with its
own core (the priming decision) and fills its instances' caches. Runs in the client's
thread (its namespace). A front door without that endpoint (a real engine) leaves the
caches cold, and the answer says so. Decides nothing itself.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive.replay import ReplayPlan
from pddbench.workloads.materialize import Materializer, namespaced
from pddbench.workloads.schema import Col

BATCH_TOKENS = 1 << 21  # tokens per POST (a few MB of JSON)


def prime_prompts(plan: ReplayPlan, options: ReplayOptions) -> Iterator[list[int]]:
    """The token IDs of each primed prefix, earliest needed first."""
    if plan.priming is None:
        return
    lists = plan.table.column(Col.BLOCK_HASHES).combine_chunks()
    offsets = lists.offsets.to_numpy()
    flat = lists.values.to_numpy(zero_copy_only=False)
    sizes = plan.table.column(Col.BLOCK_SIZE).to_numpy()
    mats: dict[int, Materializer] = {}
    for e in plan.priming.entries:
        bs = int(sizes[e.row])
        m = mats.get(bs)
        if m is None:
            m = mats[bs] = Materializer(
                bs, vocab_size=options.vocab_size, first_id=options.first_token_id
            )
        start = offsets[e.row]
        yield m.prompt(namespaced(flat[start : start + e.blocks], e.namespace), e.blocks * bs)


def _post(url: str, body: bytes, timeout_s: float) -> dict[str, object]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        out = json.loads(resp.read())
    assert isinstance(out, dict)
    return out


@dataclass(frozen=True)
class PrimeResult:
    """What a priming did: the servers' answer (server blocks added per instance), or why
    the caches were left as they were."""

    trace_blocks: int  # the plan's
    prefixes: int = 0
    placements: int = 0
    blocks: dict[str, int] = field(default_factory=dict)  # server blocks added, by instance
    problem: str = ""  # set when nothing was primed

    def describe(self) -> str:
        if self.problem:
            return self.problem
        added = ", ".join(f"{k} {v}" for k, v in sorted(self.blocks.items()))
        return (
            f"caches primed with {self.trace_blocks} trace blocks of history ({self.prefixes} "
            f"prefixes, {self.placements} placements; server blocks added: {added})"
        )


def prime_deployment(
    front_door: str, plan: ReplayPlan, options: ReplayOptions, *, timeout_s: float = 300.0
) -> PrimeResult:
    """Send the plan's primes to the front door; what the servers did."""
    trace_blocks = 0 if plan.priming is None else plan.priming.blocks
    if plan.priming is None or not plan.priming.entries:
        return PrimeResult(trace_blocks, problem="nothing to prime")
    url = front_door.rstrip("/") + "/internal/prime"
    batch: list[list[int]] = []
    tokens = 0
    try:
        for prompt in prime_prompts(plan, options):
            batch.append(prompt)
            tokens += len(prompt)
            if tokens >= BATCH_TOKENS:
                _post(url, orjson.dumps({"prompts": batch, "final": False}), timeout_s)
                batch, tokens = [], 0
        answer = _post(url, orjson.dumps({"prompts": batch, "final": True}), timeout_s)
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405):
            why = "the front door has no /internal/prime (not a reference router): caches cold"
        else:
            why = f"priming failed ({exc}): caches as they were"
        return PrimeResult(trace_blocks, problem=why)
    except OSError as exc:
        return PrimeResult(trace_blocks, problem=f"priming failed ({exc}): caches as they were")
    blocks = answer.get("blocks")
    return PrimeResult(
        trace_blocks,
        prefixes=int(str(answer.get("prefixes", 0))),
        placements=int(str(answer.get("placements", 0))),
        blocks={str(k): int(v) for k, v in blocks.items()} if isinstance(blocks, dict) else {},
    )
