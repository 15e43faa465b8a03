"""HTTP clients for one streamed completion: OpenAI ``/v1/completions`` and SGLang ``/generate``.

Owns the wire: building the request body from token IDs, reading the SSE stream, stamping
each chunk with the run's monotonic clock and handing it to the sans-IO
:class:`~pddbench.harness.stream.StreamAccumulator`, and turning every failure
(connection refused, HTTP error, server error event, stall, cut stream) into a
:class:`~pddbench.harness.records.RequestRecord` with a status and an error class —
never an exception escaping to the engine.

Stalls are bounded by ``stall_timeout_s`` (no byte for that long ends the request), not
only by a whole-request timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import aiohttp
import numpy as np

from pddbench.harness.records import ErrorClass, RequestRecord, Status
from pddbench.harness.stream import StreamAccumulator, StreamSummary


class ApiKind(StrEnum):
    OPENAI = "openai"
    SGLANG = "sglang"


@dataclass(frozen=True)
class ApiConfig:
    """How to talk to the server under test."""

    kind: ApiKind = ApiKind.OPENAI
    path: str | None = None  # default: /v1/completions (openai) or /generate (sglang)
    model: str | None = None
    ignore_eos: bool = True
    send_min_tokens: bool = True
    return_token_ids: bool = True
    request_timeout_s: float = 900.0
    stall_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    keep_token_times: bool = False

    @property
    def endpoint(self) -> str:
        if self.path:
            return self.path
        return "/generate" if self.kind is ApiKind.SGLANG else "/v1/completions"

    def timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=self.request_timeout_s,
            sock_connect=self.connect_timeout_s,
            sock_read=self.stall_timeout_s,
        )


def request_body(api: ApiConfig, prompt: list[int], max_tokens: int, request_id: str) -> dict:
    """The JSON body of one request (token-ID prompt, exact output length)."""
    if api.kind is ApiKind.SGLANG:
        sampling: dict[str, object] = {"max_new_tokens": max_tokens, "ignore_eos": api.ignore_eos}
        if api.send_min_tokens:
            sampling["min_new_tokens"] = max_tokens
        return {"input_ids": prompt, "sampling_params": sampling, "stream": True, "rid": request_id}
    body: dict[str, object] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": api.ignore_eos,
        "temperature": 0.0,
    }
    if api.model:
        body["model"] = api.model
    if api.send_min_tokens:
        body["min_tokens"] = max_tokens
    if api.return_token_ids:
        body["return_token_ids"] = True
    return body


def _error_text(payload: object) -> str:
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(payload)


async def stream_completion(
    http: aiohttp.ClientSession,
    base_url: str,
    api: ApiConfig,
    record: RequestRecord,
    prompt: list[int],
    clock: Callable[[], float],
    *,
    expected_token_fn: Callable[[int], int] | None = None,
) -> RequestRecord:
    """Send one request, read its stream, and fill ``record`` (also returned)."""
    acc = StreamAccumulator(expected_token_fn=expected_token_fn)
    feed = acc.feed_sglang if api.kind is ApiKind.SGLANG else acc.feed_openai
    body = request_body(api, prompt, record.expected_output_tokens, record.request_id)
    headers = {"X-Request-Id": record.request_id}
    record.actual_send_s = clock()
    server_error: str | None = None
    done = False
    try:
        async with http.post(
            base_url + api.endpoint, json=body, headers=headers, timeout=api.timeout()
        ) as resp:
            if resp.status >= 400:
                text = (await resp.text())[:300]
                with contextlib.suppress(json.JSONDecodeError):
                    text = _error_text(json.loads(text))
                return _fail(record, clock, ErrorClass.HTTP, f"HTTP {resp.status}: {text}")
            async for raw in resp.content:
                now = clock()
                if not raw.startswith(b"data:"):
                    continue
                data = raw[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    server_error = f"malformed stream chunk: {data[:80]!r}"
                    break
                if isinstance(chunk, dict) and "error" in chunk:
                    server_error = _error_text(chunk)
                    break
                feed(now, chunk)
                if api.kind is ApiKind.SGLANG and _sglang_finished(chunk):
                    done = True
    except TimeoutError:
        _finish(record, acc.summary(record.expected_output_tokens), clock)
        return _fail(
            record,
            clock,
            ErrorClass.TIMEOUT,
            "timed out (request or stall limit)",
            status=Status.TIMEOUT,
        )
    except asyncio.CancelledError:
        _finish(record, acc.summary(record.expected_output_tokens), clock)
        _fail(record, clock, ErrorClass.CANCELLED, "cancelled", status=Status.CANCELLED)
        raise
    except aiohttp.ClientConnectorError as exc:
        return _fail(record, clock, ErrorClass.CONNECT, f"cannot connect: {exc.os_error}")
    except (aiohttp.ClientError, OSError) as exc:
        _finish(record, acc.summary(record.expected_output_tokens), clock)
        return _fail(record, clock, ErrorClass.STREAM, f"{type(exc).__name__}: {exc}")
    summary = acc.summary(record.expected_output_tokens)
    _finish(record, summary, clock)
    if api.keep_token_times:
        record.token_times_s = list(summary.token_times_s)
    if server_error is not None:
        return _fail(record, clock, ErrorClass.STREAM, server_error)
    if not done:
        return _fail(record, clock, ErrorClass.STREAM, "stream ended without [DONE]")
    if summary.integrity_ok is False:
        return _fail(record, clock, ErrorClass.INTEGRITY, summary.integrity_error or "integrity")
    return record


def _sglang_finished(chunk: object) -> bool:
    meta = chunk.get("meta_info") if isinstance(chunk, dict) else None
    return isinstance(meta, dict) and meta.get("finish_reason") is not None


def _finish(record: RequestRecord, s: StreamSummary, clock: Callable[[], float]) -> None:
    record.end_s = clock()
    record.chunks = s.chunks
    record.output_tokens = s.output_tokens
    record.first_token_s = s.first_token_s
    record.last_token_s = s.last_token_s
    send = record.actual_send_s
    if send is not None:
        record.e2e_s = record.end_s - send
        if s.first_token_s is not None:
            record.ttft_s = s.first_token_s - send
    record.tpot_s = s.tpot_s
    if s.itl_s.size:
        p50, p90, p99 = np.percentile(s.itl_s, [50, 90, 99])
        record.itl_mean_s = float(s.itl_s.mean())
        record.itl_p50_s, record.itl_p90_s, record.itl_p99_s = float(p50), float(p90), float(p99)
        record.itl_max_s = float(s.itl_s.max())
    record.cached_tokens_reported = s.cached_tokens_reported
    record.integrity_ok = s.integrity_ok
    if s.server_timing is not None:
        pdd = s.server_timing
        record.server_timing = json.dumps(pdd, separators=(",", ":"))
        record.pipeline = _str_or_none(pdd.get("pipeline"))
        record.first_token_origin = _str_or_none(pdd.get("first_token_origin"))
        record.handoff_mode = _str_or_none(pdd.get("handoff_mode"))
        record.relay_tokens = _int_or_none(pdd.get("relay_tokens"))
        record.wan_bytes = _int_or_none(pdd.get("wan_bytes"))


def _str_or_none(v: object) -> str | None:
    return None if v is None else str(v)


def _int_or_none(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) else None


def _fail(
    record: RequestRecord,
    clock: Callable[[], float],
    error_class: ErrorClass,
    message: str,
    *,
    status: Status = Status.ERROR,
) -> RequestRecord:
    if record.end_s is None:
        record.end_s = clock()
    record.status = status
    record.error_class = error_class
    record.error_message = message[:500]
    return record
