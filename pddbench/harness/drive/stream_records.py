"""Pure pieces shared by every streaming client: SSE lines → stream accounting → a filled record.

Owns what a client decides without I/O: reading the ``data:`` lines of one streamed
response (:class:`SseReader`, feeding the :class:`~.stream.StreamAccumulator`),
turning the stream's summary into :class:`~pddbench.harness.rundir.records.RequestRecord` fields
(:func:`finish_record`), the rules that make a finished stream a failure
(:func:`settle_record`), failures as values (:func:`fail_record`), and the records an
engine creates for a due or a skipped request. The asyncio client (aiohttp) and the
Locust engine's gevent client both use it, so a stream means the same thing whichever
engine read it.

Must not: open sockets, read clocks (times and clock callables are passed in), or import
an event-loop library.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable

# orjson parses stream chunks several times faster than json
from orjson import JSONDecodeError as _DecodeError
from orjson import loads as _loads

from pddbench.harness.drive.stream import StreamAccumulator, StreamSummary
from pddbench.harness.plan.player import DueRequest, PlannedRequest
from pddbench.harness.rundir.records import ErrorClass, RequestRecord, Status

Clock = Callable[[], float]


def error_text(payload: object) -> str:
    """The human part of an error body or error event (OpenAI or plain shapes)."""
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(payload)


def http_error_message(status: int, body: bytes | str) -> str:
    """``HTTP <status>: <message>`` from an error response's first bytes."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    text = text[:300]
    with contextlib.suppress(json.JSONDecodeError):
        text = error_text(json.loads(text))
    return f"HTTP {status}: {text}"


def sglang_finished(chunk: object) -> bool:
    """True when an SGLang ``/generate`` chunk says the request finished."""
    meta = chunk.get("meta_info") if isinstance(chunk, dict) else None
    return isinstance(meta, dict) and meta.get("finish_reason") is not None


class SseReader:
    """Reads the lines of one SSE response (sans-IO) and says when to stop reading.

    ``feed`` takes raw body bytes as they arrived; ``feed_line`` takes one raw line (with
    or without its line ending). Both take the clock reading of the arrival and return
    True when the client should stop reading (``[DONE]``, a server error event, a
    malformed chunk).
    """

    __slots__ = ("_feed", "_partial", "_sglang", "acc", "done", "server_error")

    def __init__(self, acc: StreamAccumulator, *, sglang: bool = False):
        self.acc = acc
        self._sglang = sglang
        self._feed = acc.feed_sglang if sglang else acc.feed_openai
        self._partial = b""
        self.done = False
        self.server_error: str | None = None

    def feed(self, now: float, data: bytes) -> bool:
        """Take raw body bytes (any split, lines may be cut anywhere) that arrived at ``now``.

        Every complete line is read at ``now``; a line cut by the split waits for the
        rest (its time is the time its end arrived). Returns like :meth:`feed_line`."""
        if self._partial:
            data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return any(line.startswith(b"data:") and self.feed_line(now, line) for line in lines)

    def drain(self) -> bool:
        """Nothing is kept to parse later (it parses as it reads); as ``DeferredSse.drain``."""
        return False

    def feed_line(self, now: float, raw: bytes) -> bool:
        if not raw.startswith(b"data:"):
            return False
        data = raw[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = _loads(data)
        except _DecodeError:
            self.server_error = f"malformed stream chunk: {data[:80]!r}"
            return True
        if isinstance(chunk, dict) and "error" in chunk:
            self.server_error = error_text(chunk)
            return True
        self._feed(now, chunk)
        if self._sglang and sglang_finished(chunk):
            self.done = True
        return False


class DeferredSse:
    """A body sink that only stamps and keeps bytes; :meth:`drain` parses them later.

    Parsing a 64-token response costs ~0.2 ms of CPU. Done inside ``data_received`` it
    delays the reads of every other connection ready in the same loop iteration, so
    their first-token stamps come late. Deferred, every read of an iteration is stamped
    first and parsed afterwards, with the same timestamps. ``feed`` still tells the
    client to stop at ``data: [DONE]`` (a byte search) or at a server error event (bytes
    holding ``"error"`` are parsed at once), and the caller drains before reading the
    stream's summary.
    OpenAI streams only: SGLang's end of stream needs parsing (use :class:`SseReader`).
    """

    __slots__ = ("pending", "reader")

    def __init__(self, reader: SseReader):
        self.reader = reader
        self.pending: list[tuple[float, bytes]] = []

    def feed(self, now: float, data: bytes) -> bool:
        self.pending.append((now, data))
        if b"data: [DONE]" in data or b"data:[DONE]" in data:
            return True  # the end, whatever the rest says; parsed by drain()
        if b'"error"' in data:  # maybe an error event (or a token's text): parse now
            return self.drain()
        return False

    def drain(self) -> bool:
        """Parse what was kept; True when the stream says stop (as ``SseReader.feed``)."""
        pending, self.pending = self.pending, []
        return any(self.reader.feed(now, data) for now, data in pending)


def finish_record(record: RequestRecord, s: StreamSummary, clock: Clock) -> None:
    """Copy what a (possibly cut-off) stream measured into ``record``; stamps ``end_s``."""
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
        ordered = sorted(s.itl_s.tolist())  # np.percentile costs ~10x more on short lists
        record.itl_mean_s = math.fsum(ordered) / len(ordered)
        record.itl_p50_s = linear_percentile(ordered, 50.0)
        record.itl_p90_s = linear_percentile(ordered, 90.0)
        record.itl_p99_s = linear_percentile(ordered, 99.0)
        record.itl_max_s = ordered[-1]
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


def linear_percentile(ordered: list[float], q: float) -> float:
    """The ``q``-th percentile of sorted values, interpolated as ``numpy.percentile`` does."""
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    if lo + 1 >= len(ordered):
        return ordered[-1]
    return ordered[lo] + (ordered[lo + 1] - ordered[lo]) * (pos - lo)


def fail_record(
    record: RequestRecord,
    clock: Clock,
    error_class: ErrorClass,
    message: str,
    *,
    status: Status = Status.ERROR,
) -> RequestRecord:
    """Mark ``record`` failed (keeps an ``end_s`` already stamped)."""
    if record.end_s is None:
        record.end_s = clock()
    record.status = status
    record.error_class = error_class
    record.error_message = message[:500]
    return record


def settle_record(
    record: RequestRecord,
    reader: SseReader,
    summary: StreamSummary,
    clock: Clock,
    *,
    keep_token_times: bool = False,
) -> RequestRecord:
    """Fill ``record`` from a stream that ended without a transport error, and judge it.

    ``summary`` is ``reader.acc.summary(record.expected_output_tokens)``.
    """
    finish_record(record, summary, clock)
    if keep_token_times:
        record.token_times_s = list(summary.token_times_s)
    if reader.server_error is not None:
        return fail_record(record, clock, ErrorClass.STREAM, reader.server_error)
    if not reader.done:
        return fail_record(record, clock, ErrorClass.STREAM, "stream ended without [DONE]")
    if summary.integrity_ok is False:
        return fail_record(
            record, clock, ErrorClass.INTEGRITY, summary.integrity_error or "integrity"
        )
    return record


def record_for(due: DueRequest, cached_theoretical: dict[str, int] | None) -> RequestRecord:
    """The record an engine opens for a request it is about to send."""
    req = due.request
    record = RequestRecord(
        request_id=req.request_id,
        session_id=req.session_id,
        turn_index=req.turn_index,
        parent_request_id=req.parent_request_id,
        intended_send_s=due.intended_send_s,
        input_tokens=req.input_length,
        expected_output_tokens=req.output_length,
    )
    if cached_theoretical is not None:
        record.cached_tokens_theoretical = cached_theoretical.get(req.request_id)
    return record


def skipped_record(req: PlannedRequest) -> RequestRecord:
    """The record of a request never sent because one it depends on failed."""
    return RequestRecord(
        request_id=req.request_id,
        session_id=req.session_id,
        turn_index=req.turn_index,
        parent_request_id=req.parent_request_id,
        intended_send_s=float("nan"),
        input_tokens=req.input_length,
        expected_output_tokens=req.output_length,
        status=Status.SKIPPED,
        error_class=ErrorClass.DEPENDENCY,
        error_message="a request this one depends on failed",
    )


def _str_or_none(v: object) -> str | None:
    return None if v is None else str(v)


def _int_or_none(v: object) -> int | None:
    return int(v) if isinstance(v, int | float) else None
