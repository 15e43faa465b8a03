"""The pure rules behind the corpus, without sockets or processes: output lengths, SSE
event boundaries, journal rows, the timed journal flush, scenario error lines."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pddbench.harness.drive.stream import StreamAccumulator, StreamSummary
from pddbench.harness.drive.stream_records import SseReader, output_length_problem
from pddbench.harness.rundir.records import Journal, RequestRecord, is_record, read_journal


def _summary(tokens: int, source: str) -> StreamSummary:
    return StreamSummary(
        first_token_s=0.0 if tokens else None, last_token_s=0.0 if tokens else None,
        output_tokens=tokens, token_count_source=source, chunks=tokens, itl_s=np.empty(0),
        cached_tokens_reported=None, prompt_tokens_reported=None, integrity_ok=None,
        integrity_error=None, server_timing=None, token_times_s=[],
    )


@pytest.mark.parametrize(
    ("tokens", "source", "exact", "problem"),
    [
        (16, "token_ids", True, None),
        (0, "token_ids", False, "no output token"),
        (0, "chunks", True, "no output token"),
        (11, "token_ids", True, "11 output tokens (by token ids), 16 asked with ignore_eos"),
        (11, "usage", False, None),  # without ignore_eos the server may stop early
        (11, "chunks", True, None),  # a chunk may carry several tokens: a lower bound
        (32, "usage", False, "32 output tokens (by usage), more than the 16 asked"),
        (17, "chunks", True, "more than the 16 asked"),
    ],
)
def test_output_length_rules(tokens: int, source: str, exact: bool, problem: str | None):
    got = output_length_problem(_summary(tokens, source), 16, exact=exact)
    assert (got is None) if problem is None else (got is not None and problem in got)


def _read(*pieces: bytes) -> tuple[SseReader, bool]:
    reader = SseReader(StreamAccumulator())
    stopped = False
    for i, piece in enumerate(pieces):
        stopped = reader.feed(float(i), piece) or stopped
        if stopped:
            break
    return reader, stopped


TOKEN = b'data: {"choices": [{"token_ids": [7], "text": "x"}]}'


@pytest.mark.parametrize("sep", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_sse_events_end_at_a_blank_line_whatever_the_line_ends(sep: bytes):
    reader, stopped = _read(TOKEN + sep + b"data: [DONE]" + sep)
    assert stopped and reader.done and reader.acc.chunks == 1


def test_sse_crlf_cut_between_reads_is_one_line_end():
    reader, stopped = _read(TOKEN + b"\r", b"\n\r", b"\ndata: [DONE]\r\n\r\n")
    assert stopped and reader.acc.chunks == 1


def test_sse_done_inside_a_token_text_is_not_the_end():
    text = b'data: {"choices": [{"token_ids": [7], "text": "data: [DONE]\\n\\n"}]}\n\n'
    reader, stopped = _read(text)
    assert not stopped and not reader.done and reader.acc.chunks == 1


def test_sse_event_without_its_blank_line_is_not_read():
    reader, stopped = _read(TOKEN + b"\n", b"data: [DONE]\n")
    assert not stopped and reader.acc.chunks == 0


def test_sse_non_object_chunk_is_a_stream_error():
    reader, stopped = _read(b"data: [1, 2]\n\n")
    assert stopped and "not a JSON object" in (reader.server_error or "")


@pytest.mark.parametrize(
    ("row", "ok"),
    [
        ({"request_id": "a", "ttft_s": 0.5, "output_tokens": 3}, True),
        ({"request_id": "a", "ttft_s": None}, True),
        ({"request_id": 7}, False),
        ({"status": "ok"}, False),
        ([1, 2], False),
        ({"request_id": "a", "ttft_s": "fast"}, False),
        ({"request_id": "a", "output_tokens": True}, False),
        ({"request_id": "a", "wan_bytes": 10**30}, False),
        ({"request_id": "a", "token_times_s": [0.1, "x"]}, False),
        ({"request_id": "a", "unknown_field": object()}, True),  # unknown keys are ignored
    ],
)
def test_journal_rows_that_are_records(row: object, ok: bool):
    assert is_record(row) is ok


def test_journal_reaches_the_os_within_the_interval_without_another_record(tmp_path: Path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, flush_interval_s=0.1)
    try:
        journal.append(RequestRecord("r0", "s0", 0, None, 0.0))
        deadline = time.monotonic() + 5
        while not path.read_text():  # read by another file object: what a SIGKILL leaves
            assert time.monotonic() < deadline, "the journal was never flushed"
            time.sleep(0.01)
        rows, bad = read_journal(path)
        assert [r["request_id"] for r in rows] == ["r0"] and bad == 0
    finally:
        journal.close()


def test_scenario_error_lines_name_the_field():
    from pydantic import ValidationError

    from pddbench.servers.config import DeploymentConfig, error_lines

    data = {"name": "d", "architecture": "pd", "instances": [
        {"id": "r", "role": "router", "address": "127.0.0.1:1"},
        {"id": "p", "role": "prefil", "address": "127.0.0.1:2"},
    ]}
    with pytest.raises(ValidationError) as err:
        DeploymentConfig.model_validate(data)
    (line,) = error_lines(err.value, "deployment")
    assert line.startswith("deployment.instances[1].role: got 'prefil'; input should be")
