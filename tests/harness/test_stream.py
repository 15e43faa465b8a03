"""stream.py's TTFT/ITL rules and the SGLang ``/generate`` parser, without sockets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pddbench.harness.drive.stream import StreamAccumulator
from pddbench.harness.drive.stream_records import SseReader, sglang_finished


def _openai(ids: list[int] | None = None, text: str = "", **extra: object) -> dict[str, object]:
    choice: dict[str, object] = {"text": text}
    if ids is not None:
        choice["token_ids"] = ids
    return {"choices": [choice], **extra}


def test_ttft_is_the_first_chunk_that_carries_a_token() -> None:
    acc = StreamAccumulator()
    acc.feed_openai(1.0, {"choices": [{"text": ""}]})  # role-only / empty: not a token
    acc.feed_openai(1.5, {"usage": {"prompt_tokens": 7}})  # no choices at all
    acc.feed_openai(2.0, _openai([11]))
    acc.feed_openai(3.0, _openai([12]))
    s = acc.summary()
    assert s.first_token_s == 2.0 and s.last_token_s == 3.0
    assert s.chunks == 4 and s.output_tokens == 2 and s.token_count_source == "token_ids"


def test_a_chunk_of_k_tokens_splits_its_gap_evenly_and_the_first_chunk_adds_zeros() -> None:
    acc = StreamAccumulator()
    acc.feed_openai(1.0, _openai([1, 2, 3]))  # three tokens in the first chunk
    acc.feed_openai(2.0, _openai([4, 5]))  # the gap of 1 s shared by two tokens
    acc.feed_openai(2.3, _openai([6]))
    s = acc.summary()
    np.testing.assert_allclose(s.itl_s, [0.0, 0.0, 0.5, 0.5, 0.3])
    assert s.itl_s.size == s.output_tokens - 1
    assert s.tpot_s == pytest.approx((2.3 - 1.0) / 5)


def test_token_counts_prefer_ids_then_usage_then_text_chunks() -> None:
    by_usage = StreamAccumulator()
    by_usage.feed_openai(1.0, _openai(text="a"))
    by_usage.feed_openai(2.0, _openai(text="b", usage={"completion_tokens": 5}))
    s = by_usage.summary()
    assert (s.output_tokens, s.token_count_source) == (5, "usage")
    by_chunks = StreamAccumulator()
    by_chunks.feed_openai(1.0, _openai(text="a"))
    by_chunks.feed_openai(2.0, _openai(text="bc"))
    assert (by_chunks.summary().output_tokens, by_chunks.summary().token_count_source) == (
        2,
        "chunks",
    )


def test_integrity_catches_a_duplicate_at_a_seam() -> None:
    acc = StreamAccumulator(expected_token_fn=lambda i: 100 + i)
    acc.feed_openai(1.0, _openai([100, 101]))
    acc.feed_openai(2.0, _openai([101, 102]))  # 101 again where 102 was due
    s = acc.summary()
    assert s.integrity_ok is False and "token 2: got 101, expected 102" in (s.integrity_error or "")


def _sse(*events: dict[str, object]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_sglang_cumulative_output_ids_meta_info_and_end_of_stream() -> None:
    acc = StreamAccumulator(expected_token_fn=lambda i: i)
    reader = SseReader(acc, sglang=True)
    meta = {"prompt_tokens": 40, "cached_tokens": 32, "completion_tokens": 1}
    first = {"output_ids": [0], "meta_info": {**meta, "finish_reason": None}}
    second = {"output_ids": [0, 1, 2], "meta_info": {**meta, "completion_tokens": 3}}
    last = {
        "output_ids": [0, 1, 2, 3],
        "meta_info": {**meta, "completion_tokens": 4, "finish_reason": {"type": "length"}},
    }
    assert not reader.feed(1.0, _sse(first))
    assert not reader.feed(2.0, _sse(second)[:9])  # an event cut mid-line waits for its end
    assert not reader.feed(2.0, _sse(second)[9:])
    reader.feed(3.0, _sse(last))
    assert reader.done  # finish_reason marks the stream complete
    s = acc.summary()
    assert s.output_tokens == 4 and s.integrity_ok is True  # each id counted once
    assert (s.prompt_tokens_reported, s.cached_tokens_reported) == (40, 32)
    np.testing.assert_allclose(s.itl_s, [0.5, 0.5, 1.0])
    assert sglang_finished(last) and not sglang_finished(first) and not sglang_finished([1])


def test_sglang_without_ids_counts_from_completion_tokens() -> None:
    acc = StreamAccumulator()
    acc.feed_sglang(1.0, {"text": "a", "meta_info": {"completion_tokens": 1}})
    acc.feed_sglang(2.0, {"text": "abc", "meta_info": {"completion_tokens": 3}})
    s = acc.summary()
    assert (s.output_tokens, s.first_token_s, s.last_token_s) == (3, 1.0, 2.0)
    assert s.token_count_source == "usage"


def test_sglang_server_error_event_stops_the_stream() -> None:
    reader = SseReader(StreamAccumulator(), sglang=True)
    assert reader.feed(1.0, _sse({"error": {"message": "decode d1 died"}}))
    assert "d1" in (reader.server_error or "")
