"""Prometheus parsing and the engines' metric names under common names.

The vLLM and llama.cpp bodies in ``data/`` were captured from the real engines running on
this machine kind (vLLM 0.32 CPU, llama-server from llama-cpp-python 0.3.36); SGLang's
is its documented exposition (its PyPI build does not run on this CPU).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pddbench.harness.engines.metrics import (
    COMMON_METRICS,
    MAPPINGS,
    Engine,
    ExpositionError,
    Sample,
    common_name,
    engine_of,
    map_samples,
    parse_prometheus,
    total,
)
from pddbench.servers.metrics import Registry

DATA = Path(__file__).parent / "data"

SGLANG_DOC = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.5e+06
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
sglang:num_decode_transfer_queue_reqs{model_name="m"} 2.0
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.35e+06
sglang:time_to_first_token_seconds_bucket{le="0.001",model_name="m"} 0.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
"""


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_vllm_real_exposition_maps_cache_queue_and_block_size() -> None:
    samples = map_samples(parse_prometheus(_read("vllm-0.32.0-cpu.metrics.txt")))
    assert total(samples, "prefix_cache_hit_tokens_total") == 4352
    assert total(samples, "prefix_cache_query_tokens_total") == 8922
    assert total(samples, "prompt_tokens_total") == 8922
    assert total(samples, "prompt_tokens_computed_total") == 4570  # 8922 - 4352
    assert total(samples, "generation_tokens_total") == 24
    assert total(samples, "requests_finished_total") == 4
    assert total(samples, "requests_waiting") == 0
    assert total(samples, "ttft_seconds_count") == 4
    (info,) = [s for s in samples if s.metric == "cache_config_info"]
    assert dict(info.labels)["block_size"] == "128"
    raw = {s.raw_name for s in samples}
    assert not any(n.endswith(("_created", "_bucket")) for n in raw)
    assert not any(n.startswith(("python_", "process_", "http_")) for n in raw)


def test_llamacpp_real_exposition_derives_queries_from_computed_and_cached() -> None:
    samples = map_samples(parse_prometheus(_read("llamacpp-0.3.36.metrics.txt")))
    hits = total(samples, "prefix_cache_hit_tokens_total")
    computed = total(samples, "prompt_tokens_computed_total")
    assert hits is not None and computed is not None and hits > 0
    assert total(samples, "prefix_cache_query_tokens_total") == hits + computed
    assert total(samples, "prompt_tokens_total") == hits + computed
    assert total(samples, "requests_running") == 0
    assert total(samples, "generation_tokens_total") is not None


def test_sglang_documented_names_map() -> None:
    samples = map_samples(parse_prometheus(SGLANG_DOC))
    assert total(samples, "prefix_cache_hit_tokens_total") == 6.5e6
    assert total(samples, "prompt_tokens_total") == 8.128902e6
    assert total(samples, "requests_waiting") == 3
    assert total(samples, "requests_running") == 12
    assert total(samples, "kv_cache_usage_ratio") == pytest.approx(0.28)
    assert total(samples, "pd_decode_transfer_queue") == 2
    assert total(samples, "ttft_seconds_count") == 5
    assert total(samples, "ttft_seconds_bucket") is None  # buckets only on request
    with_buckets = map_samples(parse_prometheus(SGLANG_DOC), keep_buckets=True)
    assert total(with_buckets, "ttft_seconds_bucket") == 5


def test_reference_server_names_map() -> None:
    reg = Registry({"instance": "md0", "role": "main-decode"})
    hits = reg.counter("pdd_prefix_cache_hits_tokens_total", "hits")
    hits.inc(640)
    reg.gauge("pdd_queue_depth", "queue", lambda: 3.0)
    samples = map_samples(parse_prometheus(reg.render()))
    assert total(samples, "prefix_cache_hit_tokens_total") == 640
    assert total(samples, "requests_waiting") == 3
    (s,) = [s for s in samples if s.metric == "requests_waiting"]
    assert dict(s.labels) == {"instance": "md0", "role": "main-decode"}


def test_every_mapping_targets_a_documented_common_name() -> None:
    for engine, table in MAPPINGS.items():
        for raw, common in table.items():
            assert engine_of(raw) is engine
            assert common in COMMON_METRICS, (raw, common)
    assert common_name("vllm:time_to_first_token_seconds_sum") == "ttft_seconds_sum"
    assert common_name("vllm:not_a_metric") is None
    assert common_name("go_goroutines") is None
    assert engine_of("llamacpp:prompt_tokens_total") is Engine.LLAMACPP


def test_labels_escapes_special_values_and_unmapped() -> None:
    text = (
        'a_metric{path="C:\\\\x",msg="say \\"hi\\"\\n",z="{,}"} +Inf\n'
        "b_metric NaN\n"
        "c_metric{} -1.5e-3 1700000000000\n"
    )
    a, b, c = parse_prometheus(text)
    labels = (("msg", 'say "hi"\n'), ("path", "C:\\x"), ("z", "{,}"))
    assert a == Sample("a_metric", labels, math.inf)
    assert b.name == "b_metric" and math.isnan(b.value)
    assert c == Sample("c_metric", (), -1.5e-3)
    kept = map_samples([a, b, c], keep_unmapped=True)
    assert [s.metric for s in kept] == ["a_metric", "b_metric", "c_metric"]
    assert map_samples([a, b, c]) == []


@pytest.mark.parametrize(
    "line", ["no_value", 'x{a="1"', 'x{a=1} 2', "x 1.2.3", 'x{a="open} 1']
)
def test_malformed_lines_raise(line: str) -> None:
    with pytest.raises(ExpositionError):
        parse_prometheus(line + "\n")
