"""The gevent HTTP client of a Locust worker: one streamed completion, same semantics as aiohttp's.

Owns the wire inside a worker process: a geventhttpclient connection pool (unbounded for an
open-loop schedule, idle sockets checked before reuse), the request body from
:func:`~pddbench.harness.client.request_body`, reading the SSE stream line by line,
stamping each line with the run clock and handing it to the shared sans-IO
:class:`~pddbench.harness.stream_records.SseReader`. Failures become record fields with
the same error classes as the asyncio client (connect, http, stream, timeout,
integrity, cancelled), never exceptions — except a greenlet kill, which is recorded as
cancelled and then re-raised.

Must not: be imported by the asyncio harness process (gevent world only).
"""

from __future__ import annotations

import errno
import json
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

import gevent
import numpy as np
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPParseError
from greenlet import GreenletExit

from pddbench.harness.client import ApiConfig, ApiKind, request_body
from pddbench.harness.records import ErrorClass, RequestRecord, Status
from pddbench.harness.stream import StreamAccumulator
from pddbench.harness.stream_records import (
    SseReader,
    fail_record,
    finish_record,
    http_error_message,
    settle_record,
)

_CONNECT_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}
_MAX_POOL = 65536  # "unbounded": sockets are created only when requests are in flight


class _RequestDeadline(Exception):
    """The whole-request limit passed (raised by a gevent.Timeout)."""


def http_client(base_url: str, api: ApiConfig) -> HTTPClient:
    """A pooled client for ``base_url`` with the API's connect and stall limits."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {base_url!r}")
    return HTTPClient(
        parts.hostname,
        port=parts.port,
        ssl=parts.scheme == "https",
        concurrency=_MAX_POOL,
        connection_timeout=api.connect_timeout_s,
        network_timeout=api.stall_timeout_s,
        block_size=64 * 1024,
    )


def endpoint_path(base_url: str, api: ApiConfig) -> str:
    """The request path: the base URL's own path prefix plus the API endpoint."""
    prefix = urlsplit(base_url).path.rstrip("/")
    return prefix + api.endpoint


def stream_completion(
    http: HTTPClient,
    path: str,
    api: ApiConfig,
    record: RequestRecord,
    prompt: list[int],
    clock: Callable[[], float],
    *,
    expected_token_fn: Callable[[int], int] | None = None,
    on_itl: Callable[[np.ndarray], None] | None = None,
) -> RequestRecord:
    """Send one request, read its stream, and fill ``record`` (also returned).

    ``on_itl`` receives the per-token intervals of a stream read to its end (live view).
    """
    acc = StreamAccumulator(expected_token_fn=expected_token_fn)
    reader = SseReader(acc, sglang=api.kind is ApiKind.SGLANG)
    body = json.dumps(
        request_body(api, prompt, record.expected_output_tokens, record.request_id)
    ).encode()
    headers = {"X-Request-Id": record.request_id, "Content-Type": "application/json"}
    resp = None
    connected = read_to_end = False
    record.actual_send_s = clock()
    try:
        with gevent.Timeout(api.request_timeout_s, _RequestDeadline):
            resp = http.post(path, body=body, headers=headers)
            connected = True
            if resp.status_code >= 400:
                return fail_record(
                    record,
                    clock,
                    ErrorClass.HTTP,
                    http_error_message(resp.status_code, resp.read()),
                )
            readline = resp.readline
            while True:
                raw = readline(b"\n")
                if not raw:
                    break
                if reader.feed_line(clock(), raw):
                    break
            read_to_end = True
    except (_RequestDeadline, TimeoutError):
        finish_record(record, acc.summary(record.expected_output_tokens), clock)
        return fail_record(
            record,
            clock,
            ErrorClass.TIMEOUT,
            "timed out (request or stall limit)",
            status=Status.TIMEOUT,
        )
    except GreenletExit:
        finish_record(record, acc.summary(record.expected_output_tokens), clock)
        fail_record(record, clock, ErrorClass.CANCELLED, "cancelled", status=Status.CANCELLED)
        raise
    except (OSError, HTTPParseError) as exc:
        if not connected and _is_connect_error(exc):
            return fail_record(record, clock, ErrorClass.CONNECT, f"cannot connect: {exc}")
        finish_record(record, acc.summary(record.expected_output_tokens), clock)
        return fail_record(record, clock, ErrorClass.STREAM, f"{type(exc).__name__}: {exc}")
    finally:
        if resp is not None:
            _release(resp, drain=read_to_end)
    summary = acc.summary(record.expected_output_tokens)
    if on_itl is not None:
        on_itl(summary.itl_s)
    return settle_record(record, reader, summary, clock, keep_token_times=api.keep_token_times)


def _is_connect_error(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionRefusedError | socket.gaierror):
        return True
    return isinstance(exc, OSError) and exc.errno in _CONNECT_ERRNOS


def _release(resp: object, *, drain: bool) -> None:
    """Give the connection back (reused only when its response was read to the end).

    With ``drain``, first read the few bytes after ``[DONE]`` (the chunked terminator) so
    a finished stream's connection can be reused.
    """
    try:
        if drain and not resp.message_complete:  # type: ignore[attr-defined]
            with gevent.Timeout(0.05, False):
                while resp.readline(b"\n"):  # type: ignore[attr-defined]
                    pass
    except Exception:  # a broken connection is closed by release(), nothing to report
        pass
    finally:
        resp.release()  # type: ignore[attr-defined]
