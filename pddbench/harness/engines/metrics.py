"""Engine metrics: Prometheus text parsing and per-engine names mapped to common names.

Owns reading the Prometheus text exposition format (what every engine's ``GET /metrics``
serves) into samples, and the tables that put vLLM's, SGLang's, llama.cpp's and the
reference servers' own names for the same quantity (prefix-cache hits, queue depth, ...)
under one common name, so one analysis reads any engine's ``server_metrics.parquet``.
The engine is recognised by each series' prefix (``vllm:``, ``sglang:``, ``llamacpp:``,
``pdd_``). Must not do I/O (the scraper, :mod:`pddbench.harness.drive.scrape`, fetches).

Names were taken from the engines' real output: vLLM 0.32 (CPU build) and llama.cpp's
``llama-server --metrics`` (llama-cpp-python 0.3.36's tree) were run here; SGLang's come
from its metrics collector (``sglang/srt/metrics/collector.py``), which does not run on
this CPU. Histograms keep their ``_sum`` and ``_count`` (bucket series only on request).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

Labels = tuple[tuple[str, str], ...]


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLAMACPP = "llamacpp"
    PDDBENCH = "pddbench"  # the reference servers (pddbench.servers)


PREFIXES: dict[str, Engine] = {
    "vllm:": Engine.VLLM,
    "sglang:": Engine.SGLANG,
    "llamacpp:": Engine.LLAMACPP,
    "pdd_": Engine.PDDBENCH,
}

#: Common metric names and what they mean (tokens are prompt tokens unless stated).
COMMON_METRICS: dict[str, str] = {
    "requests_running": "requests in the running batch (gauge)",
    "requests_waiting": "requests queued, not yet scheduled (gauge)",
    "kv_cache_usage_ratio": "fraction of the KV cache in use, 0..1 (gauge)",
    "kv_used_tokens": "KV cache tokens in use (gauge)",
    "kv_capacity_tokens": "KV cache capacity in tokens (gauge)",
    "prefix_cache_query_tokens_total": "prompt tokens looked up in the prefix cache",
    "prefix_cache_hit_tokens_total": "prompt tokens served from the prefix cache",
    "prompt_tokens_total": "prompt tokens received (cached or not)",
    "prompt_tokens_computed_total": "prompt tokens actually computed (prefill work)",
    "generation_tokens_total": "output tokens generated",
    "requests_finished_total": "requests finished",
    "requests_aborted_total": "requests aborted",
    "preemptions_total": "preemptions (vLLM) / retractions (SGLang)",
    "ttft_seconds": "time to first token (histogram: _sum, _count)",
    "e2e_seconds": "end-to-end request latency (histogram: _sum, _count)",
    "queue_time_seconds": "time spent queued (histogram: _sum, _count)",
    "itl_seconds": "inter-token latency (histogram: _sum, _count)",
    "prefill_time_seconds": "time in prefill (histogram: _sum, _count)",
    "decode_time_seconds": "time in decode (histogram: _sum, _count)",
    "prompt_seconds_total": "seconds spent on prompt processing",
    "generation_seconds_total": "seconds spent generating",
    "pd_prefill_prealloc_queue": "PD: requests waiting for a decode slot on prefill (gauge)",
    "pd_prefill_inflight_queue": "PD: requests whose KV is being sent (gauge)",
    "pd_decode_prealloc_queue": "PD: requests waiting for KV memory on decode (gauge)",
    "pd_decode_transfer_queue": "PD: requests whose KV is arriving on decode (gauge)",
    "kv_transfer_latency_ms": "PD: last KV transfer latency (gauge)",
    "kv_transfer_speed_gb_s": "PD: last KV transfer speed (gauge)",
    "kv_transfer_failures_total": "PD: failed KV transfers",
    "kv_bytes_sent_total": "bytes of KV sent (reference servers)",
    "kv_bytes_received_total": "bytes of KV received (reference servers)",
    "busy_seconds_total": "modelled accelerator busy time (reference servers)",
    "cache_config_info": "the engine's cache configuration in labels, value 1 (vLLM: block_size)",
}

#: Raw series name (without histogram suffix) → common name, per engine.
MAPPINGS: dict[Engine, dict[str, str]] = {
    Engine.VLLM: {
        "vllm:num_requests_running": "requests_running",
        "vllm:num_requests_waiting": "requests_waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage_ratio",
        "vllm:gpu_cache_usage_perc": "kv_cache_usage_ratio",  # before 0.10
        "vllm:prefix_cache_queries_total": "prefix_cache_query_tokens_total",
        "vllm:prefix_cache_hits_total": "prefix_cache_hit_tokens_total",
        "vllm:gpu_prefix_cache_queries_total": "prefix_cache_query_tokens_total",  # older
        "vllm:gpu_prefix_cache_hits_total": "prefix_cache_hit_tokens_total",  # older
        "vllm:prompt_tokens_total": "prompt_tokens_total",
        "vllm:request_prefill_kv_computed_tokens_sum": "prompt_tokens_computed_total",
        "vllm:generation_tokens_total": "generation_tokens_total",
        "vllm:request_success_total": "requests_finished_total",
        "vllm:num_preemptions_total": "preemptions_total",
        "vllm:time_to_first_token_seconds": "ttft_seconds",
        "vllm:e2e_request_latency_seconds": "e2e_seconds",
        "vllm:request_queue_time_seconds": "queue_time_seconds",
        "vllm:inter_token_latency_seconds": "itl_seconds",
        "vllm:request_prefill_time_seconds": "prefill_time_seconds",
        "vllm:request_decode_time_seconds": "decode_time_seconds",
        "vllm:cache_config_info": "cache_config_info",
    },
    Engine.SGLANG: {
        "sglang:num_running_reqs": "requests_running",
        "sglang:num_queue_reqs": "requests_waiting",
        "sglang:token_usage": "kv_cache_usage_ratio",
        "sglang:num_used_tokens": "kv_used_tokens",
        "sglang:max_total_num_tokens": "kv_capacity_tokens",
        "sglang:cached_tokens_total": "prefix_cache_hit_tokens_total",
        "sglang:prompt_tokens_total": "prompt_tokens_total",
        "sglang:generation_tokens_total": "generation_tokens_total",
        "sglang:num_requests_total": "requests_finished_total",
        "sglang:num_aborted_requests_total": "requests_aborted_total",
        "sglang:num_retracted_requests_total": "preemptions_total",
        "sglang:time_to_first_token_seconds": "ttft_seconds",
        "sglang:e2e_request_latency_seconds": "e2e_seconds",
        "sglang:queue_time_seconds": "queue_time_seconds",
        "sglang:inter_token_latency_seconds": "itl_seconds",
        "sglang:num_prefill_prealloc_queue_reqs": "pd_prefill_prealloc_queue",
        "sglang:num_prefill_inflight_queue_reqs": "pd_prefill_inflight_queue",
        "sglang:num_decode_prealloc_queue_reqs": "pd_decode_prealloc_queue",
        "sglang:num_decode_transfer_queue_reqs": "pd_decode_transfer_queue",
        "sglang:kv_transfer_latency_ms": "kv_transfer_latency_ms",
        "sglang:kv_transfer_speed_gb_s": "kv_transfer_speed_gb_s",
        "sglang:num_transfer_failed_reqs_total": "kv_transfer_failures_total",
    },
    Engine.LLAMACPP: {
        "llamacpp:requests_processing": "requests_running",
        "llamacpp:requests_deferred": "requests_waiting",
        "llamacpp:prompt_tokens_cached_total": "prefix_cache_hit_tokens_total",
        "llamacpp:prompt_tokens_total": "prompt_tokens_computed_total",  # excludes cached
        "llamacpp:tokens_predicted_total": "generation_tokens_total",
        "llamacpp:prompt_seconds_total": "prompt_seconds_total",
        "llamacpp:tokens_predicted_seconds_total": "generation_seconds_total",
    },
    Engine.PDDBENCH: {
        "pdd_running_requests": "requests_running",
        "pdd_queue_depth": "requests_waiting",
        "pdd_kv_used_tokens": "kv_used_tokens",
        "pdd_kv_capacity_tokens": "kv_capacity_tokens",
        "pdd_prefix_cache_queries_tokens_total": "prefix_cache_query_tokens_total",
        "pdd_prefix_cache_hits_tokens_total": "prefix_cache_hit_tokens_total",
        "pdd_prefill_tokens_total": "prompt_tokens_computed_total",
        "pdd_generated_tokens_total": "generation_tokens_total",
        "pdd_kv_bytes_sent_total": "kv_bytes_sent_total",
        "pdd_kv_bytes_received_total": "kv_bytes_received_total",
        "pdd_busy_seconds_total": "busy_seconds_total",
    },
}

#: Common counters an engine does not export but that follow from two it does:
#: target ← sum of sources (same labels).
DERIVED: dict[Engine, dict[str, tuple[str, ...]]] = {
    Engine.LLAMACPP: {
        "prefix_cache_query_tokens_total": (
            "llamacpp:prompt_tokens_total",
            "llamacpp:prompt_tokens_cached_total",
        ),
        "prompt_tokens_total": (
            "llamacpp:prompt_tokens_total",
            "llamacpp:prompt_tokens_cached_total",
        ),
    },
}

_HIST_SUFFIXES = ("_sum", "_count", "_bucket")


@dataclass(frozen=True)
class Sample:
    """One series value of a Prometheus exposition."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class MappedSample:
    """A sample under its common name (``metric``), keeping the engine's own name."""

    metric: str
    raw_name: str
    labels: Labels
    value: float


class ExpositionError(ValueError):
    """A /metrics body that is not Prometheus text."""


def _parse_labels(text: str, line: str) -> Labels:
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= n or text[eq + 1] != '"':
            raise ExpositionError(f"bad labels in line {line[:120]!r}")
        key = text[i:eq].strip()
        j, buf = eq + 2, []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                nxt = text[j + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                j += 2
            else:
                buf.append(text[j])
                j += 1
        if j >= n:
            raise ExpositionError(f"unterminated label value in line {line[:120]!r}")
        out.append((key, "".join(buf)))
        i = j + 1
    return tuple(sorted(out))


def _parse_value(text: str, line: str) -> float:
    word = text.split()[0] if text.split() else ""
    special = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if word in special:
        return special[word]
    try:
        return float(word)
    except ValueError:
        raise ExpositionError(f"bad value in line {line[:120]!r}") from None


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (0.0.4); comments and blank lines skipped."""
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            close = line.rfind("}")
            if close < brace:
                raise ExpositionError(f"unclosed labels in line {line[:120]!r}")
            name = line[:brace]
            labels = _parse_labels(line[brace + 1 : close], line)
            rest = line[close + 1 :]
        else:
            if space < 0:
                raise ExpositionError(f"no value in line {line[:120]!r}")
            name, labels, rest = line[:space], (), line[space:]
        samples.append(Sample(name.strip(), labels, _parse_value(rest, line)))
    return samples


def engine_of(raw_name: str) -> Engine | None:
    """The engine a series belongs to, by its name's prefix."""
    for prefix, engine in PREFIXES.items():
        if raw_name.startswith(prefix):
            return engine
    return None


def common_name(raw_name: str) -> str | None:
    """The common name of a raw series (histogram suffixes kept), or None if unmapped."""
    engine = engine_of(raw_name)
    if engine is None:
        return None
    table = MAPPINGS[engine]
    if raw_name in table:
        return table[raw_name]
    for suffix in _HIST_SUFFIXES:
        if raw_name.endswith(suffix):
            base = table.get(raw_name[: -len(suffix)])
            if base is not None and base.endswith("_seconds"):
                return base + suffix
    return None


def map_samples(
    samples: Iterable[Sample], *, keep_unmapped: bool = False, keep_buckets: bool = False
) -> list[MappedSample]:
    """Samples under their common names, plus derived counters (e.g. llama.cpp's queries).

    Unmapped series are dropped unless ``keep_unmapped`` (then ``metric`` is the raw name);
    histogram buckets are dropped unless ``keep_buckets``.
    """
    out: list[MappedSample] = []
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
        if not keep_buckets and s.name.endswith("_bucket"):
            continue
        metric = common_name(s.name)
        if metric is None:
            if not keep_unmapped:
                continue
            metric = s.name
        out.append(MappedSample(metric, s.name, s.labels, s.value))
    engines = {engine_of(n) for n in by_name} - {None}
    for engine in engines:
        for target, sources in DERIVED.get(engine, {}).items():  # type: ignore[arg-type]
            if not all(src in by_name for src in sources):
                continue
            totals: dict[Labels, float] = {}
            for src in sources:
                for s in by_name[src]:
                    totals[s.labels] = totals.get(s.labels, 0.0) + s.value
            raw = "+".join(sources)
            out.extend(MappedSample(target, raw, lab, v) for lab, v in totals.items())
    return out


def total(samples: Iterable[MappedSample], metric: str) -> float | None:
    """Sum of a common metric over all its label sets (None when absent)."""
    values = [s.value for s in samples if s.metric == metric]
    return sum(values) if values else None
