"""The Prometheus series one worker instance exports on ``GET /metrics``.

Owns the metric names and where their values come from (engine statistics, KV pool, the
instance's own counters, the process's loop-lag probe); :func:`add_engine_series` is the
part read from the engine and pool alone, which the twin samples too. No I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pddbench.servers.clock import LoopLagMonitor
from pddbench.servers.metrics import Counter, Registry

if TYPE_CHECKING:
    from pddbench.servers.engine import Engine
    from pddbench.servers.instance import WorkerInstance
    from pddbench.servers.radix import KvPool


class _FnCounter(Counter):
    """A counter whose value is read from elsewhere at scrape time."""

    def __init__(self, name: str, help_text: str, fn: object) -> None:
        super().__init__(name, help_text)
        self.fn = fn

    def samples(self):  # type: ignore[no-untyped-def]
        self.values[()] = float(self.fn())  # type: ignore[operator]
        return super().samples()


def add_engine_series(r: Registry, engine: Engine, pool: KvPool) -> None:
    """The series read from the engine and its KV pool at scrape time: what a worker's
    scheduler and caches did (the twin samples these very series in virtual time)."""
    st = engine.stats
    r.add(
        _FnCounter(
            "pdd_prefix_cache_queries_tokens_total",
            "Prompt tokens looked up in the prefix cache",
            lambda: st.cache_query_tokens,
        )
    )
    r.add(
        _FnCounter(
            "pdd_prefix_cache_hits_tokens_total",
            "Prompt tokens found in the prefix cache",
            lambda: st.cache_hit_tokens,
        )
    )
    r.gauge(
        "pdd_queue_depth",
        "Requests waiting for KV memory or for prefill",
        lambda: engine.queue_depth,
    )
    r.gauge(
        "pdd_running_requests",
        "Requests in the running (decode/extend) batch",
        lambda: engine.running,
    )
    r.gauge(
        "pdd_kv_used_tokens",
        "KV tokens in use (cached blocks + private)",
        lambda: pool.used_tokens,
    )
    r.gauge(
        "pdd_kv_cached_tokens",
        "KV tokens held by the prefix cache",
        lambda: pool.tree.blocks * pool.block_size,
    )
    r.gauge(
        "pdd_kv_capacity_tokens",
        "KV capacity (HBM minus weights minus reserve)",
        lambda: pool.capacity_tokens,
    )
    r.add(
        _FnCounter(
            "pdd_busy_seconds_total",
            "Modelled GPU busy time (sum of step costs)",
            lambda: st.busy_s,
        )
    )
    r.add(_FnCounter("pdd_steps_total", "Forward passes run", lambda: st.steps))
    r.add(
        _FnCounter("pdd_prefill_tokens_total", "Prompt tokens computed", lambda: st.prefill_tokens)
    )


class InstanceMetrics:
    def __init__(self, inst: WorkerInstance, loop_lag: LoopLagMonitor) -> None:
        r = self.registry = Registry({"instance": inst.id, "role": inst.role.value})
        add_engine_series(r, inst.engine, inst.pool)
        self.kv_sent = r.counter(
            "pdd_kv_bytes_sent_total",
            "Real bytes of KV (and handoff payload) sent, per peer and path",
            ("peer", "path"),
        )
        self.kv_received = r.counter(
            "pdd_kv_bytes_received_total",
            "Real bytes of KV (and handoff payload) received",
            ("peer", "path"),
        )
        self.handoffs = r.counter(
            "pdd_handoffs_total", "Handoff batches sent or applied, by mode", ("mode",)
        )
        self.relayed = r.counter(
            "pdd_relayed_tokens_total", "Output tokens this instance emitted as a relay (RLD)"
        )
        self.tokens = r.counter("pdd_generated_tokens_total", "Output tokens emitted")
        self.requests = r.counter("pdd_requests_total", "Requests received, by kind", ("kind",))
        self.errors = r.counter("pdd_request_errors_total", "Request failures, by kind", ("kind",))
        self.sched_lag = r.histogram(
            "pdd_scheduler_lag_seconds", "How late the end of a modelled step was observed"
        )
        self.lost = r.counter(
            "pdd_scheduler_lost_seconds_total",
            "Lag beyond the catch-up tolerance, not absorbed into the model",
        )
        r.add(loop_lag.histogram)

    def render(self) -> str:
        return self.registry.render()
