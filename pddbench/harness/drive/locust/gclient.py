"""One streamed completion from a Locust worker: same semantics as the asyncio engine's client.

Owns one request's life inside a worker process: the request body from
:func:`~pddbench.harness.drive.client.request_body` (orjson-encoded), the exchange on the
worker's keep-alive pool (:mod:`.ghttp`, one clock reading per socket read), the raw body
bytes handed to the shared sans-IO :class:`~pddbench.harness.drive.stream_records.SseReader`.
Failures become record fields with the same error classes as the asyncio client
(connect, http, stream, timeout, integrity, cancelled), never exceptions — except a
greenlet kill, which is recorded as cancelled and then re-raised.

Must not: be imported by the asyncio harness process (gevent world only).
"""

from __future__ import annotations

from collections.abc import Callable

import gevent
import numpy as np
from greenlet import GreenletExit

from pddbench.harness.config.replay import ApiConfig
from pddbench.harness.drive.client import cut_short, prepare_exchange, settle_reply
from pddbench.harness.drive.locust.ghttp import ConnectFailed, GeventHttp1Pool, StreamCut
from pddbench.harness.drive.stream_records import (
    fail_record,
)
from pddbench.harness.rundir.records import ErrorClass, RequestRecord, Status


class _RequestDeadline(Exception):
    """The whole-request limit passed (raised by a gevent.Timeout)."""


def http_client(base_url: str, api: ApiConfig) -> GeventHttp1Pool:
    """A keep-alive pool for ``base_url`` with the API's connect and stall limits."""
    return GeventHttp1Pool(
        base_url, connect_timeout_s=api.connect_timeout_s, stall_timeout_s=api.stall_timeout_s
    )


def stream_completion(
    http: GeventHttp1Pool,
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
    acc, reader, body, headers = prepare_exchange(api, record, prompt, expected_token_fn)
    record.actual_send_s = clock()
    try:
        with gevent.Timeout(api.request_timeout_s, _RequestDeadline):
            reply = http.exchange("POST", api.endpoint, body, headers, reader, clock)
    except _RequestDeadline:
        return cut_short(
            record,
            acc,
            clock,
            ErrorClass.REQUEST_LIMIT,
            f"censored: request ran past {api.request_timeout_s:g} s",
            status=Status.CENSORED,
        )
    except TimeoutError:
        return cut_short(
            record,
            acc,
            clock,
            ErrorClass.TIMEOUT,
            f"timed out: no data for {api.stall_timeout_s:g} s",
            status=Status.TIMEOUT,
        )
    except GreenletExit:
        cut_short(record, acc, clock, ErrorClass.CANCELLED, "cancelled", status=Status.CANCELLED)
        raise
    except ConnectFailed as exc:
        return fail_record(record, clock, ErrorClass.CONNECT, f"cannot connect: {exc}")
    except (StreamCut, OSError) as exc:
        return cut_short(record, acc, clock, ErrorClass.STREAM, str(exc) or type(exc).__name__)
    if on_itl is not None and reply.status < 400:
        on_itl(acc.summary().itl_s)
    return settle_reply(record, reply.status, reply.error_body, reader, api, clock)
