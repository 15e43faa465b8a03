"""Experiments priced from the reference servers' compute model (no server process).

Owns the two model-only measurements: the chunked-prefill throughput of a saturated
prefill instance at one prefix hit rate (E2's bathtub and dips, run through the real
scheduler :class:`pddbench.servers.engine.Engine`), and the price of a 100-token RLD → MD
handoff, KV transfer vs Extend-Decode (E7 where the emulated WAN is not available).
``bench/bench_chunk_dips.py`` and ``bench/bench_handoff_model.py`` print these same
functions' results.

Why the harness imports ``servers`` here: these experiments *are* the compute model
(profiles, roofline costs, the scheduler), with no HTTP in between; the import is
confined to this module, which the rest of the harness never imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from pddbench.servers import profiles
from pddbench.servers.compute import (
    Machine,
    decode_step_seconds,
    extend_step_seconds,
    kv_copy_seconds,
)
from pddbench.servers.engine import Engine, SchedulerConfig, Seq
from pddbench.servers.radix import KvPool
from pddbench.servers.tokens import TokenStream

MODEL = "pdd-flagship-1t"
BLOCK = 64
CHUNK = 8192
# a 10 Gbit/s WAN, 15 ms one way, ±3 ms jitter: the bottom of the published 10-100 Gbit/s
# range (the built-in scenarios' line is 100 Gbit/s, sized for the main job's load)
WAN_BYTES_PER_S = 10e9 / 8
ONE_WAY_S = 0.015
JITTER_S = 0.003
TOKEN_IDS_BYTES = 1500  # 100 token ids (PDD.md)


def prefill_machine() -> Machine:
    """The flagship's prefill instance: 16 x H800."""
    return Machine(profiles.hardware("h800-sxm"), 16, profiles.model(MODEL))


def uncached_per_s(m: Machine, lengths: list[int], hit: float, packing: bool) -> float:
    """Uncached prompt tokens computed per second when ``lengths`` prompts at ``hit`` saturate m."""
    pool = KvPool(10**9, BLOCK)
    e = Engine(m, pool, SchedulerConfig(chunk_tokens=CHUNK, prefill_packing=packing))
    for i, n in enumerate(lengths):
        hashes = [i * 10**7 + b for b in range(n // BLOCK)]
        cached_blocks = min(int(hit * n) // BLOCK, (n - 1) // BLOCK)
        if cached_blocks:
            pool.tree.insert(hashes[:cached_blocks])
        s = Seq(
            f"r{i}",
            n,
            hashes,
            TokenStream(0, f"r{i}", 1000),
            max_tokens=1,
            compute_prompt=True,
            decode_after_kv=False,
        )
        e.submit(s, 0.0)
    t = 0.0
    while (step := e.plan(t)) is not None:
        t += step.duration
        e.complete(step, t)
    return e.stats.prefill_tokens / t


@dataclass(frozen=True)
class HandoffPrice:
    """Send → acknowledgement of one handoff, both ways, from the model."""

    md_step_s: float
    extend_step_s: float
    ed_bytes: int
    ed_mean_s: float
    ed_max_s: float
    kv_bytes: int
    kv_copy_rld_s: float
    kv_copy_md_s: float
    kv_mean_s: float
    kv_max_s: float


def price_handoff(*, batch: int = 32, context: int = 36000, tokens: int = 100) -> HandoffPrice:
    """E7 priced: MD (16 x H20) decoding ``batch`` sequences at ``context`` tokens.

    Extend-Decode: token ids one way, MD waits for the step in flight (uniform over one
    step), runs the extend, answers. KV: RLD gathers ``tokens - 1`` tokens' KV, it crosses
    an idle WAN, MD scatters it. WAN queueing behind other KV is not modelled.
    """
    model = profiles.model(MODEL)
    md = Machine(profiles.hardware("h20"), 16, model)
    rld = Machine(profiles.hardware("h800-sxm"), 16, model)
    step = decode_step_seconds(md, batch, batch * context)
    ext = extend_step_seconds(md, tokens, context)
    ids = TOKEN_IDS_BYTES / WAN_BYTES_PER_S
    kv_bytes = int((tokens - 1) * model.kv_bytes_per_token)
    copy_rld = kv_copy_seconds(rld, tokens - 1, BLOCK)
    copy_md = kv_copy_seconds(md, tokens - 1, BLOCK)
    kv_mean = 2 * ONE_WAY_S + kv_bytes / WAN_BYTES_PER_S + copy_rld + copy_md
    return HandoffPrice(
        md_step_s=step,
        extend_step_s=ext,
        ed_bytes=TOKEN_IDS_BYTES,
        ed_mean_s=2 * ONE_WAY_S + ids + step / 2 + ext,
        ed_max_s=2 * (ONE_WAY_S + JITTER_S) + ids + step + ext,
        kv_bytes=kv_bytes,
        kv_copy_rld_s=copy_rld,
        kv_copy_md_s=copy_md,
        kv_mean_s=kv_mean,
        kv_max_s=kv_mean + 2 * JITTER_S,
    )
