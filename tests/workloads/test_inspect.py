"""Trace inspection: a hand-computed summary, bin boundaries, weeks, the CLI's text, JSON
and plot outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.inspect import (
    bin_index,
    hit_share_series,
    summarize,
)
from pddbench.workloads.inspect_cli import inspect_command
from pddbench.workloads.schema import COARSE_HIT_BINS, PUBLISHED_HIT_BINS
from pddbench.workloads.traceio import Trace, build_table, read_trace, write_trace

EPOCH = "2026-01-05T00:00:00+00:00"
R = list(range(1, 11))  # block hashes 1..10


def tiny(arrival_shift_last: float = 0.0) -> Trace:
    """Six requests, block size 4, with hand-computed unbounded-cache hits:

    r0 s0 t0  in 8  [1,2]              ->  0 cached, 0 %
    r1 s0 t1  in 40 [1..10]            ->  8 cached, 20 %
    r2 s0 t2  in 40 [1..10]            -> 40 cached, 100 %
    r3 s1 t0  in 42 [1..10, 11p]       -> 40 cached, 95.24 % (11 is the partial block)
    r4 s1 t1  in 50 [1..10, 12, 13]    -> 40 cached, 80 %
    r5 s2 t0  in 40 [1..9, 77]         -> 36 cached, 90 % (sub-agent of s1, parent r4)
    """
    table = build_table(
        request_id=["r0", "r1", "r2", "r3", "r4", "r5"],
        session_id=["s0", "s0", "s0", "s1", "s1", "s2"],
        parent_request_id=[None, "r0", "r1", None, "r3", "r4"],
        parent_session_id=[None, None, None, None, None, "s1"],
        turn_index=[0, 1, 2, 0, 1, 0],
        arrival_s=[0.0, 10.0, 20.0, 30.0, 40.0, 50.0 + arrival_shift_last],
        input_length=[8, 40, 40, 42, 50, 40],
        output_length=[1, 2, 3, 4, 5, 6],
        block_size=4,
        block_hashes=[[1, 2], R, R, [*R, 11], [*R, 12, 13], [*R[:9], 77]],
    )
    return Trace(table=table, epoch=EPOCH, path="tiny.parquet")


def test_hand_computed_summary() -> None:
    trace = tiny()
    hits = prefix_hits(trace.table)
    assert hits.cached_tokens.tolist() == [0, 8, 40, 40, 40, 36]
    s = summarize(trace, hits)
    assert (s.requests, s.sessions, s.subagent_sessions) == (6, 3, 1)
    assert (s.turns_per_session.mean, s.turns_per_session.p50) == (2.0, 2.0)
    assert s.turns_per_session.p90 == pytest.approx(2.8)
    assert s.turns_per_session.max == 3.0
    assert (s.first_arrival_s, s.last_arrival_s, s.time_span_s) == (0.0, 50.0, 50.0)
    assert s.request_rate_per_s == pytest.approx(6 / 50)
    assert s.session_rate_per_s == pytest.approx(3 / 50)
    assert s.input_length.mean == pytest.approx(220 / 6)
    assert (s.input_length.p50, s.input_length.max) == (40.0, 50.0)
    assert s.output_length.mean == pytest.approx(3.5)

    h = s.hit
    assert h.capacity_blocks is None
    assert (h.requests, h.input_tokens, h.cached_tokens) == (6, 220, 164)
    assert h.token_weighted == pytest.approx(164 / 220)
    assert h.mean_per_request == pytest.approx((0 + 0.2 + 1 + 40 / 42 + 0.8 + 0.9) / 6)
    assert h.share_ge_95 == pytest.approx(2 / 6)
    assert h.share_lt_50 == pytest.approx(2 / 6)
    assert [b.requests for b in h.bins] == [3, 1, 1, 0, 0, 0, 1]
    assert [b.label for b in h.bins] == ["0-90%", "90-95%", "95-96%", "96-97%", "97-98%",
                                         "98-99%", "99-100%"]
    assert [b.requests for b in h.coarse_bins] == [2, 1, 1, 2]
    assert sum(b.share or 0 for b in h.bins) == pytest.approx(1.0)
    assert len(s.weeks) == 1 and s.weeks[0].label == "2026-01-05"
    assert s.weeks[0].hit == h


def test_weeks_are_counted_from_the_epoch_and_labelled() -> None:
    trace = tiny(arrival_shift_last=7 * 86400.0)  # r5 falls in the second week
    s = summarize(trace, prefix_hits(trace.table))
    assert [w.label for w in s.weeks] == ["2026-01-05", "2026-01-12"]
    assert [w.hit.requests for w in s.weeks] == [5, 1]
    assert s.weeks[1].hit.bins[1].requests == 1  # r5: exactly 90 % -> the 90-95 bin
    assert s.weeks[1].start_s == 7 * 86400.0
    no_epoch = Trace(table=trace.table, epoch=None)
    assert [w.label for w in summarize(no_epoch, prefix_hits(trace.table)).weeks] == [
        "week 1", "week 2"]


def test_bin_boundaries_are_low_inclusive_and_100_is_in_the_last_bin() -> None:
    rates = np.array([0.0, 0.8999, 0.9, 0.95, 19 / 20, 0.9599, 0.99, 1.0])
    assert bin_index(rates, PUBLISHED_HIT_BINS).tolist() == [0, 0, 1, 2, 2, 2, 6, 6]
    assert bin_index(np.array([0.4999, 0.5, 0.95, 1.0]), COARSE_HIT_BINS).tolist() == [0, 1, 3, 3]


def test_hourly_series_for_a_short_trace() -> None:
    trace = tiny(arrival_shift_last=2 * 3600.0)  # r5 two hours later: an empty hour between
    series = hit_share_series(trace, prefix_hits(trace.table))
    assert series.period_s == 3600.0
    assert series.start_s.tolist() == [0.0, 3600.0, 7200.0]
    assert series.requests.tolist() == [5, 0, 1]
    np.testing.assert_allclose(series.shares.sum(axis=1), [1.0, 0.0, 1.0])
    np.testing.assert_allclose(series.shares[0], [3 / 5, 0, 1 / 5, 0, 0, 0, 1 / 5])
    np.testing.assert_allclose(series.shares[2], [0, 1, 0, 0, 0, 0, 0])
    long = tiny(arrival_shift_last=5 * 86400.0)
    week_long = hit_share_series(long, prefix_hits(long.table))
    assert week_long.period_s == 86400.0 and week_long.requests.tolist() == [5, 0, 0, 0, 0, 1]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    trace = tiny()
    return write_trace(trace.table, tmp_path / "tiny.parquet", epoch=EPOCH)


HIT_KEYS = {"capacity_blocks", "requests", "input_tokens", "cached_tokens", "token_weighted",
            "mean_per_request", "share_ge_95", "share_lt_50", "bins", "coarse_bins"}
TOP_KEYS = {"format", "version", "file", "epoch", "requests", "sessions", "subagent_sessions",
            "turns_per_session", "first_arrival_s", "last_arrival_s", "time_span_s",
            "request_rate_per_s", "session_rate_per_s", "input_length", "output_length", "hit",
            "weeks", "hashes"}


def test_json_keys(trace_file: Path) -> None:
    result = CliRunner().invoke(inspect_command, [str(trace_file), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == TOP_KEYS
    assert (doc["format"], doc["version"]) == ("pddbench.trace-summary", 1)
    assert set(doc["hit"]) == HIT_KEYS
    assert set(doc["input_length"]) == {"mean", "p50", "p90", "p99", "max"}
    assert set(doc["hit"]["bins"][0]) == {"label", "low_pct", "high_pct", "requests", "share"}
    assert len(doc["hit"]["bins"]) == 7 and len(doc["hit"]["coarse_bins"]) == 4
    assert set(doc["weeks"][0]) == {"label", "start_s", "end_s", "hit"}
    assert doc["hit"]["cached_tokens"] == 164


def test_capacity_blocks_uses_an_lru_cache(trace_file: Path) -> None:
    # capacity 2: only blocks 1 and 2 survive each request -> 8 cached tokens from r1 on
    result = CliRunner().invoke(inspect_command, [str(trace_file), "--json",
                                                  "--capacity-blocks", "2"])
    assert result.exit_code == 0, result.output
    hit = json.loads(result.stdout)["hit"]
    assert (hit["capacity_blocks"], hit["cached_tokens"]) == (2, 40)


def test_text_output(trace_file: Path) -> None:
    result = CliRunner().invoke(inspect_command, [str(trace_file)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"^token-weighted hit rate +74\.5%$", out, re.MULTILINE), out
    assert "99-100%" in out and "2026-01-05" in out and "unbounded prefix cache" in out
    assert "\x1b[" not in out  # plain text when not a terminal


def test_plot_writes_a_png(trace_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "hits.png"
    result = CliRunner().invoke(inspect_command, [str(trace_file), "--plot", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert f"plot: {out}" in result.stdout


def test_plot_into_missing_folder_is_one_line(trace_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "hits.png"
    result = CliRunner().invoke(inspect_command, [str(trace_file), "--plot", str(out)])
    assert result.exit_code == 2
    assert result.stderr == f"pddbench: {out}: folder {out.parent} does not exist\n"


def test_inspect_invalid_file_lists_problems(tmp_path: Path) -> None:
    trace = tiny()
    bad = trace.table.set_column(5, "input_length", build_table(
        request_id=["x"] * 6, session_id=["s"] * 6, turn_index=[0] * 6, arrival_s=[0.0] * 6,
        input_length=[8, 40, 0, 42, 50, 40], output_length=[1] * 6, block_size=4,
        block_hashes=[[]] * 6).column("input_length"))
    path = write_trace(bad, tmp_path / "bad.parquet")
    result = CliRunner().invoke(inspect_command, [str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"{path}: row 2: input_length: 0 is not positive\n"


def test_read_back_equals_in_memory(trace_file: Path) -> None:
    trace = read_trace(trace_file)
    assert trace.epoch == EPOCH
    a = summarize(trace, prefix_hits(trace.table))
    b = summarize(tiny(), prefix_hits(tiny().table))
    assert a.hit == b.hit and a.weeks == b.weeks
