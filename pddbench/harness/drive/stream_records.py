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

from pddbench.harness.analysis.ttft_parts import ClockJoin, decompose_story
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


class ChunkList:
    """A sink for :class:`SseReader` that keeps each parsed chunk as it is (for a proxy or a
    checker that needs the objects, not a summary); :meth:`take` hands over those read so
    far."""

    def __init__(self) -> None:
        self._got: list[dict[str, object]] = []
        self.chunks = 0

    def feed_openai(self, t: float, chunk: dict[str, object]) -> None:
        self._got.append(chunk)
        self.chunks += 1

    feed_sglang = feed_openai

    def take(self) -> list[dict[str, object]]:
        got, self._got = self._got, []
        return got


class SseReader:
    """Reads the events of one SSE response (sans-IO) and says when to stop reading.

    Parsed by event boundaries as the SSE format defines them: lines end with CRLF, LF
    or CR; an event is its ``data:`` lines (joined by newlines) up to a blank line;
    comments and other fields are ignored. So a ``data: [DONE]`` inside a token's text
    (a JSON string, which cannot hold a raw line break) never ends a stream; only an
    event whose whole data is ``[DONE]`` does. ``feed`` takes raw body bytes as they
    arrived and the clock reading of the arrival, and returns True when the client
    should stop reading (``[DONE]``, a server error event, a malformed chunk).
    """

    __slots__ = (
        "_after_cr",
        "_data",
        "_feed",
        "_partial",
        "_sglang",
        "acc",
        "done",
        "head",
        "server_error",
    )

    def __init__(self, acc: StreamAccumulator | ChunkList, *, sglang: bool = False):
        self.acc = acc
        self._sglang = sglang
        self._feed = acc.feed_sglang if sglang else acc.feed_openai
        self._partial = b""
        self._data: bytes | None = None  # the data lines of the event being read
        self._after_cr = False  # the last read ended with CR (a LF may follow in the next)
        self.done = False
        self.server_error: str | None = None
        self.head = b""  # the body's first bytes (what a stream that is none began with)

    def feed(self, now: float, data: bytes) -> bool:
        """Take raw body bytes (any split, lines may be cut anywhere) that arrived at ``now``.

        An event is read when its blank line arrives, at the time that line arrived."""
        if not self.head:
            self.head = data[:64]
        if self._after_cr and data.startswith(b"\n"):
            data = data[1:]  # the LF of a CRLF that the split cut after its CR
        self._after_cr = data.endswith(b"\r")
        if self._partial:
            data = self._partial + data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if not line:
                if self._data is not None:
                    event, self._data = self._data, None
                    if self.feed_event(now, event):
                        return True
            elif line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._data = value if self._data is None else self._data + b"\n" + value
        return False

    def drain(self) -> bool:
        """Nothing is kept to parse later (it parses as it reads); as ``DeferredSse.drain``."""
        return False

    def feed_event(self, now: float, data: bytes) -> bool:
        """One event's data (its ``data:`` lines joined); True when the stream says stop."""
        data = data.strip()
        if data == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = _loads(data)
        except _DecodeError:
            self.server_error = f"malformed stream chunk: {data[:80]!r}"
            return True
        if not isinstance(chunk, dict):
            self.server_error = f"stream chunk is not a JSON object: {data[:80]!r}"
            return True
        if "error" in chunk:
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
    first and parsed afterwards, with the same timestamps. Bytes that may end the
    stream (holding ``[DONE]`` or ``"error"``) are parsed at once, so ``feed`` still
    tells the client to stop exactly when the reader would; the caller drains before
    reading the stream's summary.
    OpenAI streams only: SGLang's end of stream needs parsing (use :class:`SseReader`).
    """

    __slots__ = ("pending", "reader")

    def __init__(self, reader: SseReader):
        self.reader = reader
        self.pending: list[tuple[float, bytes]] = []

    def feed(self, now: float, data: bytes) -> bool:
        self.pending.append((now, data))
        if b"[DONE]" in data or b'"error"' in data:
            # maybe the end or an error event (or only a token's text): parse now, by
            # event boundaries, so the reader decides
            return self.drain()
        return False

    def drain(self) -> bool:
        """Parse what was kept; True when the stream says stop (as ``SseReader.feed``)."""
        pending, self.pending = self.pending, []
        return any(self.reader.feed(now, data) for now, data in pending)


def finish_record(
    record: RequestRecord, s: StreamSummary, clock: Clock, join: ClockJoin | None = None
) -> None:
    """Copy what a (possibly cut-off) stream measured into ``record``; stamps ``end_s``.
    ``join``: how the server's times join the client's (default: this host, now)."""
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
        if send is not None and s.first_token_s is not None:
            here = ClockJoin.here(clock) if join is None else join
            parts = decompose_story(pdd, send, s.first_token_s, here)  # as its JSON would
            for name, value in parts.record_columns().items():
                setattr(record, name, value)


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
    exact_length: bool = True,
) -> RequestRecord:
    """Fill ``record`` from a stream that ended without a transport error, and judge it.

    ``summary`` is ``reader.acc.summary()``; ``exact_length``: the request asked for
    exactly its ``expected_output_tokens`` (``ignore_eos``), so fewer is a failure too.
    """
    finish_record(record, summary, clock)
    if keep_token_times:
        record.token_times_s = list(summary.token_times_s)
    if reader.server_error is not None:
        return fail_record(record, clock, ErrorClass.STREAM, reader.server_error)
    if not reader.done:
        return fail_record(record, clock, ErrorClass.STREAM, _unfinished_stream(reader))
    if summary.integrity_ok is False:
        return fail_record(
            record, clock, ErrorClass.INTEGRITY, summary.integrity_error or "integrity"
        )
    problem = output_length_problem(summary, record.expected_output_tokens, exact=exact_length)
    if problem is not None:
        return fail_record(record, clock, ErrorClass.OUTPUT_LENGTH, problem)
    return record


def _unfinished_stream(reader: SseReader) -> str:
    """Why a stream that ended without ``[DONE]`` failed: a body that is one JSON value
    (no ``data:`` event) is a server that did not stream at all."""
    if reader.head.lstrip()[:1] in (b"{", b"[") and not reader.acc.chunks:
        return (
            "the server answered plain JSON, not a stream of server-sent events (content-type"
            " application/json?): it did not stream; check that it supports stream=true"
            f" at this path (body began {reader.head[:40]!r})"
        )
    return "stream ended without [DONE]"


_COUNTED_BY = {"token_ids": "token ids", "usage": "usage", "chunks": "text chunks"}


def output_length_problem(s: StreamSummary, asked: int, *, exact: bool) -> str | None:
    """Why a complete stream's output-token count is not what was asked, or None.

    Zero tokens where some were asked and more than asked are failures for every
    request; fewer than asked only when the request asked for exactly ``asked``
    (``exact``: ``ignore_eos``) and the count is known (token ids or usage; a count of
    text chunks is a lower bound when a chunk may carry several tokens)."""
    got = s.output_tokens
    how = _COUNTED_BY.get(s.token_count_source, s.token_count_source)
    if asked > 0 and got == 0:
        return f"no output token (asked for {asked})"
    if got > asked:
        return f"{got} output tokens (by {how}), more than the {asked} asked"
    if exact and got < asked and s.token_count_source != "chunks":
        return f"{got} output tokens (by {how}), {asked} asked with ignore_eos"
    return None


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
        agent_type=req.agent_type,
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
        agent_type=req.agent_type,
        status=Status.SKIPPED,
        error_class=ErrorClass.DEPENDENCY,
        error_message="a request this one depends on failed",
    )


def _str_or_none(v: object) -> str | None:
    return None if v is None else str(v)


_INT64 = 2**63


def _int_or_none(v: object) -> int | None:
    """A server-reported count as an int64, or None when it is not one (NaN, 1e300)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return int(v) if -_INT64 <= v < _INT64 else None
