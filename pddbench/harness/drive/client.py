"""HTTP clients for one streamed completion: OpenAI ``/v1/completions`` and SGLang ``/generate``.

Owns one request's life on the wire: building the body from token IDs, sending it over the
keep-alive pool of :mod:`pddbench.harness.drive.aio.http1` (which stamps every socket read with the
run's monotonic clock), handing the SSE bytes to the sans-IO
:class:`~pddbench.harness.drive.stream_records.SseReader`, and turning every failure
(connection refused, HTTP error, server error event, stall, cut stream) into a
:class:`~pddbench.harness.rundir.records.RequestRecord` with a status and an error class —
never an exception escaping to the engine.

Stalls are bounded by ``stall_timeout_s`` (no byte for that long ends the request), not
only by a whole-request timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from pddbench.harness.config.replay import ApiConfig, ApiKind
from pddbench.harness.drive.aio.http1 import (
    ConnectFailed,
    ExchangeTimeout,
    Http1Pool,
    RequestLimit,
    StreamCut,
)
from pddbench.harness.drive.stream import StreamAccumulator
from pddbench.harness.drive.stream_records import (
    DeferredSse,
    SseReader,
    http_error_message,
    settle_record,
)
from pddbench.harness.drive.stream_records import fail_record as _fail
from pddbench.harness.drive.stream_records import finish_record as _finish
from pddbench.harness.rundir.records import ErrorClass, RequestRecord, Status


def encode_json(body: dict) -> bytes:
    """JSON bytes of a request body (orjson: ~10x faster than json on long prompts)."""
    return orjson.dumps(body)


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


def prepare_exchange(
    api: ApiConfig,
    record: RequestRecord,
    prompt: list[int],
    expected_token_fn: Callable[[int], int] | None,
) -> tuple[StreamAccumulator, SseReader, bytes, dict[str, str]]:
    """What both clients build before sending: the stream's accumulator and reader, the
    body (encoded before the send is stamped: client-side encoding is not the server's
    latency) and the headers."""
    acc = StreamAccumulator(expected_token_fn=expected_token_fn)
    reader = SseReader(acc, sglang=api.kind is ApiKind.SGLANG)
    body = encode_json(request_body(api, prompt, record.expected_output_tokens, record.request_id))
    headers = {"X-Request-Id": record.request_id, "Content-Type": "application/json"}
    return acc, reader, body, headers


def cut_short(
    record: RequestRecord,
    acc: StreamAccumulator,
    clock: Callable[[], float],
    error_class: ErrorClass,
    message: str,
    *,
    status: Status = Status.ERROR,
) -> RequestRecord:
    """A stream that ended early: what it measured so far, then the failure."""
    _finish(record, acc.summary(), clock)
    return _fail(record, clock, error_class, message, status=status)


def settle_reply(
    record: RequestRecord,
    status: int,
    error_body: bytes,
    reader: SseReader,
    api: ApiConfig,
    clock: Callable[[], float],
) -> RequestRecord:
    """A finished exchange: an HTTP error, else the stream's judged record."""
    if status >= 400:
        return _fail(record, clock, ErrorClass.HTTP, http_error_message(status, error_body))
    return settle_record(
        record,
        reader,
        reader.acc.summary(),
        clock,
        keep_token_times=api.keep_token_times,
        exact_length=api.ignore_eos,
    )


async def stream_completion(
    http: Http1Pool,
    api: ApiConfig,
    record: RequestRecord,
    prompt: list[int],
    clock: Callable[[], float],
    *,
    expected_token_fn: Callable[[int], int] | None = None,
) -> RequestRecord:
    """Send one request, read its stream, and fill ``record`` (also returned)."""
    acc, reader, payload, headers = prepare_exchange(api, record, prompt, expected_token_fn)
    sink: SseReader | DeferredSse = reader if api.kind is ApiKind.SGLANG else DeferredSse(reader)
    # stamped before a connection is taken or opened: a new connection's set-up is part of
    # what the request waited for (as in vLLM's and AIPerf's clients)
    record.actual_send_s = clock()
    try:
        reply = await http.exchange(
            "POST",
            api.endpoint,
            payload,
            headers,
            sink,
            clock,
            stall_timeout_s=api.stall_timeout_s,
            total_timeout_s=api.request_timeout_s,
        )
    except RequestLimit as exc:
        sink.drain()
        return cut_short(
            record, acc, clock, ErrorClass.REQUEST_LIMIT, f"censored: {exc}", status=Status.CENSORED
        )
    except ExchangeTimeout as exc:
        sink.drain()
        return cut_short(
            record, acc, clock, ErrorClass.TIMEOUT, f"timed out: {exc}", status=Status.TIMEOUT
        )
    except asyncio.CancelledError:
        sink.drain()
        cut_short(record, acc, clock, ErrorClass.CANCELLED, "cancelled", status=Status.CANCELLED)
        raise
    except ConnectFailed as exc:
        return _fail(record, clock, ErrorClass.CONNECT, f"cannot connect: {exc}")
    except (StreamCut, OSError) as exc:
        sink.drain()
        return cut_short(record, acc, clock, ErrorClass.STREAM, str(exc))
    if reply.status < 400 and isinstance(sink, DeferredSse):
        # let sends already due in this loop iteration go first: parsing is never late,
        # a send stamped behind a ~0.2 ms parse would be
        await asyncio.sleep(0)
        sink.drain()
    return settle_reply(record, reply.status, reply.error_body, reader, api, clock)
