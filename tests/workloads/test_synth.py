"""Tests of the synthetic agentic trace generator, its profiles and its command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from pddbench.errors import UserError
from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.schema import Col
from pddbench.workloads.synth import (
    SECONDS_PER_DAY,
    SynthOptions,
    SynthTrace,
    calibration,
    synthesise,
)
from pddbench.workloads.synth_cli import synth
from pddbench.workloads.synth_profile import builtin_profiles, load_profile, parse_profile
from pddbench.workloads.traceio import read_trace, write_trace

AGENT_BIT = np.uint64(1 << 63)


@pytest.fixture(scope="module")
def smoke() -> SynthTrace:
    return synthesise(load_profile("smoke"))


@pytest.fixture(scope="module")
def janfeb_sample() -> SynthTrace:
    return synthesise(load_profile("jan-feb"), SynthOptions(requests=20_000, seed=11))


@pytest.fixture(scope="module")
def janfeb_calibration() -> SynthTrace:
    return synthesise(load_profile("jan-feb"), SynthOptions(requests=150_000))


def _col(trace: SynthTrace, name: str) -> np.ndarray:
    return trace.table.column(name).to_numpy(zero_copy_only=False)


def _hashes(trace: SynthTrace) -> tuple[np.ndarray, np.ndarray]:
    lists = trace.table.column(Col.BLOCK_HASHES).combine_chunks()
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.to_numpy()[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


def _maps_to_one(keys: np.ndarray, vals: np.ndarray) -> bool:
    """Whether every key occurs with one value only."""
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], vals[order]
    same = k[1:] == k[:-1]
    return bool(np.all(v[1:][same] == v[:-1][same]))


def _parent_rows(trace: SynthTrace) -> np.ndarray:
    """Row index of each row's parent (-1 for turn 0), via the parent_request_id column."""
    ids = _col(trace, Col.REQUEST_ID)
    row_of = {rid: i for i, rid in enumerate(ids)}
    parents = _col(trace, Col.PARENT_REQUEST_ID)
    return np.array([row_of[p] if p is not None else -1 for p in parents], dtype=np.int64)


# ------------------------------------------------------------------ determinism


def test_same_seed_gives_identical_table_and_file(tmp_path: Path) -> None:
    profile = load_profile("smoke")
    a = synthesise(profile, SynthOptions(seed=5))
    b = synthesise(profile, SynthOptions(seed=5))
    assert a.table.equals(b.table)
    pa_, pb = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(a.table, pa_, source=a.source, epoch=a.epoch)
    write_trace(b.table, pb, source=b.source, epoch=b.epoch)
    assert pa_.read_bytes() == pb.read_bytes()


def test_different_seeds_differ() -> None:
    profile = load_profile("smoke")
    a = synthesise(profile, SynthOptions(seed=1, sessions=20))
    b = synthesise(profile, SynthOptions(seed=2, sessions=20))
    assert not a.table.equals(b.table)
    assert not np.array_equal(_col(a, Col.ARRIVAL)[:10], _col(b, Col.ARRIVAL)[:10])


# ------------------------------------------------------------------ structure


@pytest.mark.parametrize("name", ["smoke", "janfeb_sample"])
def test_turns_are_consecutive_and_parents_precede(
    name: str, request: pytest.FixtureRequest
) -> None:
    trace: SynthTrace = request.getfixturevalue(name)
    t = trace.table
    arrival = _col(trace, Col.ARRIVAL)
    assert np.all(np.diff(arrival) >= 0), "rows are in arrival order"
    assert pc.count_distinct(t.column(Col.REQUEST_ID)).as_py() == t.num_rows
    turn = _col(trace, Col.TURN_INDEX)
    session = _col(trace, Col.SESSION_ID)
    order = np.lexsort((turn, session))
    s_sorted, t_sorted = session[order], turn[order]
    new_session = np.concatenate(([True], s_sorted[1:] != s_sorted[:-1]))
    assert np.all(t_sorted[new_session] == 0)
    assert np.all(t_sorted[~new_session] == t_sorted[np.flatnonzero(~new_session) - 1] + 1)

    parent = _parent_rows(trace)
    first = turn == 0
    assert np.all(parent[first] == -1) and np.all(parent[~first] >= 0)
    assert np.all(session[parent[~first]] == session[~first])
    assert np.all(turn[parent[~first]] == turn[~first] - 1)
    think = _col(trace, Col.THINK_TIME).astype(np.float64)
    assert np.all(np.isnan(think[first])) and np.all(think[~first] > 0)
    gap = arrival[~first] - arrival[parent[~first]]
    assert np.all(gap >= think[~first])  # the service estimate comes on top of the tool time
    assert set(_col(trace, Col.AGENT_TYPE)) <= {
        a.name for a in load_profile(trace.source["profile"]).agents.types
    }


@pytest.mark.parametrize("name", ["smoke", "janfeb_sample"])
def test_block_hashes_are_chained_and_namespaced(name: str, request: pytest.FixtureRequest) -> None:
    trace: SynthTrace = request.getfixturevalue(name)
    bs = int(_col(trace, Col.BLOCK_SIZE)[0])
    inputs = _col(trace, Col.INPUT_LENGTH).astype(np.int64)
    offsets, values = _hashes(trace)
    assert np.array_equal(np.diff(offsets), -(-inputs // bs)), "full blocks + partial last block"

    profile = load_profile(trace.source["profile"])
    system = {a.name: a.system_tokens for a in profile.agents.types}
    agent_blocks = np.array([system[a] // bs for a in _col(trace, Col.AGENT_TYPE)])
    local = np.arange(values.size) - np.repeat(offsets[:-1], np.diff(offsets))
    is_agent = local < np.repeat(agent_blocks, np.diff(offsets))
    # agent-prompt blocks: high bit set, one id per position of a type's prompt
    assert np.all(values[is_agent] >= AGENT_BIT) and np.all(values[~is_agent] < AGENT_BIT)
    types, type_of_row = np.unique(_col(trace, Col.AGENT_TYPE), return_inverse=True)
    type_of = np.repeat(type_of_row, np.diff(offsets))
    for k, name_ in enumerate(types):
        sel = is_agent & (type_of == k)
        assert _maps_to_one(values[sel], local[sel]) and _maps_to_one(local[sel], values[sel])
        assert np.unique(values[sel]).size == system[name_] // bs
    assert _maps_to_one(values[is_agent], type_of[is_agent])

    # every other block id belongs to one session; partial last blocks occur exactly once
    session_of_row = np.unique(_col(trace, Col.SESSION_ID), return_inverse=True)[1]
    session_of = np.repeat(session_of_row, np.diff(offsets))
    assert _maps_to_one(values[~is_agent], session_of[~is_agent])
    uniq, counts = np.unique(values, return_counts=True)
    last = values[offsets[1:][inputs % bs != 0] - 1]
    assert np.all(counts[np.searchsorted(uniq, last)] == 1)

    # a turn keeps its parent's full blocks, unless a compaction restarted the prefix from
    # the agent prompt: then only the agent blocks are kept and the next block is new
    parent = _parent_rows(trace)
    child = np.flatnonzero(parent >= 0)
    p = parent[child]
    keep = np.minimum(inputs[p], inputs[child]) // bs
    assert keep.min() > 0
    starts = np.cumsum(keep) - keep
    within = np.arange(keep.sum()) - np.repeat(starts, keep)
    same = (
        values[np.repeat(offsets[child], keep) + within]
        == values[np.repeat(offsets[p], keep) + within]
    )
    continued = np.add.reduceat(~same, starts) == 0
    restart = ~continued
    assert restart.any() or name == "smoke"
    assert np.mean(restart) < 0.1
    rc, rp, ra = child[restart], p[restart], agent_blocks[child[restart]]
    for c, q, a in zip(rc, rp, ra, strict=True):
        assert np.array_equal(
            values[offsets[c] : offsets[c] + a], values[offsets[q] : offsets[q] + a]
        )
        assert values[offsets[c] + a] != values[offsets[q] + a]


@pytest.mark.parametrize("name", ["smoke", "janfeb_sample"])
def test_generator_cached_tokens_equal_the_hit_model(
    name: str, request: pytest.FixtureRequest
) -> None:
    trace: SynthTrace = request.getfixturevalue(name)
    replay = prefix_hits(trace.table)
    assert np.array_equal(replay.cached_tokens, trace.cached_tokens)


@pytest.mark.parametrize("block_size", [16, 4096, 32768])  # 32768: no full agent block
def test_cached_tokens_match_the_hit_model_for_any_block_size(block_size: int) -> None:
    trace = synthesise(load_profile("smoke"), SynthOptions(block_size=block_size, sessions=30))
    assert np.array_equal(prefix_hits(trace.table).cached_tokens, trace.cached_tokens)


def test_written_trace_validates(tmp_path: Path, smoke: SynthTrace) -> None:
    path = write_trace(smoke.table, tmp_path / "s.parquet", source=smoke.source, epoch=smoke.epoch)
    back = read_trace(path)
    assert back.num_requests == smoke.table.num_rows
    assert back.epoch == "2026-01-05T09:00:00Z"
    assert back.source["profile"] == "smoke" and back.source["seed"] == 7


# ------------------------------------------------------------------ size options


def test_requests_option_is_exact() -> None:
    trace = synthesise(load_profile("smoke"), SynthOptions(requests=777))
    assert trace.table.num_rows == 777


def test_sessions_days_block_size_options() -> None:
    trace = synthesise(
        load_profile("jan-feb"), SynthOptions(sessions=40, days=0.5, block_size=256, seed=3)
    )
    assert trace.sessions == 40
    assert pc.count_distinct(trace.table.column(Col.SESSION_ID)).as_py() == 40
    first = _col(trace, Col.TURN_INDEX) == 0
    assert _col(trace, Col.ARRIVAL)[first].max() < 0.5 * SECONDS_PER_DAY
    assert set(_col(trace, Col.BLOCK_SIZE)) == {256}
    offsets, _ = _hashes(trace)
    assert np.array_equal(np.diff(offsets), -(-_col(trace, Col.INPUT_LENGTH) // 256))


def test_rate_scales_the_session_count() -> None:
    profile = load_profile("smoke")
    slow = synthesise(profile, SynthOptions(rate=0.05, days=0.02))
    fast = synthesise(profile, SynthOptions(rate=0.2, days=0.02))
    # Poisson counts with means 86 and 346
    assert 50 < slow.sessions < 125 and 280 < fast.sessions < 420


@pytest.mark.parametrize(
    "options, message",
    [
        (SynthOptions(sessions=3, rate=1.0), "at most one"),
        (SynthOptions(requests=0), "--requests"),
        (SynthOptions(days=-1.0), "--days"),
        (SynthOptions(block_size=0), "--block-size"),
    ],
)
def test_bad_options_are_user_errors(options: SynthOptions, message: str) -> None:
    with pytest.raises(UserError, match=message):
        synthesise(load_profile("smoke"), options)


# ------------------------------------------------------------------ profiles


def test_builtin_profiles_load() -> None:
    assert {"jan-feb", "smoke"} <= set(builtin_profiles())
    for name in builtin_profiles():
        assert load_profile(name).name == name


def test_unknown_profile_and_missing_file() -> None:
    with pytest.raises(UserError, match="unknown profile 'nope'"):
        load_profile("nope")
    with pytest.raises(UserError, match="no such profile file"):
        load_profile("/nonexistent/p.toml")


def _smoke_text() -> str:
    return (Path(__file__).parents[2] / "pddbench/workloads/profiles/smoke.toml").read_text()


@pytest.mark.parametrize(
    "edit, message",
    [
        (("sessions_per_s = 0.06", "sessions_per_s = -1"), "arrivals.sessions_per_s"),
        (("[session]", "[session]\nturnz = 3"), "session.turnz: Extra inputs"),
        (("median = 16, sigma = 0.6, min = 2", "median = 16, sigma = 0.6, min = 90"), "above max"),
        (("min = 30000, max = 70000", "min = 3000, max = 70000"), "largest restarted prompt"),
        (('name = "smoke"', 'name = "smoke"\nname = 1'), "not valid TOML"),
    ],
)
def test_bad_profiles_give_one_clear_line(edit: tuple[str, str], message: str) -> None:
    text = _smoke_text()
    assert edit[0] in text
    with pytest.raises(UserError, match=message) as info:
        parse_profile(text.replace(edit[0], edit[1], 1), origin="p.toml")
    assert "\n" not in str(info.value) and str(info.value).startswith("p.toml: ")


def test_drift_knots_must_match() -> None:
    text = _smoke_text() + "\n[drift]\nday = [0, 1]\nturns_scale = [1.0]\n"
    with pytest.raises(UserError, match=r"drift\.turns_scale has 1 value"):
        parse_profile(text)


# ------------------------------------------------------------------ calibration


def test_janfeb_calibration_within_targets(janfeb_calibration: SynthTrace) -> None:
    fig = calibration(janfeb_calibration).overall
    assert fig.share_ge_95 is not None and 0.70 <= fig.share_ge_95 <= 0.80
    assert fig.share_lt_50 is not None and 0.02 <= fig.share_lt_50 <= 0.05
    assert fig.mean_per_request is not None and 0.85 <= fig.mean_per_request <= 0.92
    assert sum(b.share or 0 for b in fig.bins) == pytest.approx(1.0)
    outputs = _col(janfeb_calibration, Col.OUTPUT_LENGTH)
    assert np.mean(outputs < 500) > 0.8
    inputs = _col(janfeb_calibration, Col.INPUT_LENGTH)
    assert 50_000 < inputs.mean() < 90_000 and np.percentile(inputs, 90) > 100_000
    # agents compact before the model's 128K window: (almost) no request overflows it
    assert np.mean(inputs + outputs > 131_072) < 0.0005


def test_janfeb_bins_drift_week_to_week(janfeb_calibration: SynthTrace) -> None:
    weeks = calibration(janfeb_calibration).weeks
    assert [w for w, _ in weeks][:9] == list(range(9))
    full = [f for _, f in weeks[:8]]  # whole weeks
    ge95 = np.array([f.share_ge_95 for f in full])
    low_bin = np.array([f.bins[0].share for f in full])
    top_bin = np.array([f.bins[-1].share for f in full])
    assert full[0].bins[0].label == "0-90%" and full[0].bins[-1].label == "99-100%"
    assert ge95.max() - ge95.min() > 0.04  # noise is ~0.4 points at this size
    assert low_bin.max() - low_bin.min() > 0.04 and top_bin.max() - top_bin.min() > 0.03


def test_janfeb_daily_and_weekly_cycle(janfeb_calibration: SynthTrace) -> None:
    first = _col(janfeb_calibration, Col.TURN_INDEX) == 0
    start = _col(janfeb_calibration, Col.ARRIVAL)[first]
    hour = (start / 3600) % 24
    peak = np.count_nonzero(np.abs(hour - 6) < 3)  # peak_hour_utc = 6
    trough = np.count_nonzero(np.abs(hour - 18) < 3)
    assert peak > 2.5 * trough
    weekday = (3 + np.floor(start / SECONDS_PER_DAY)) % 7  # 2026-01-01 is a Thursday
    per_weekday = np.bincount(weekday.astype(np.int64), minlength=7) / np.bincount(
        ((3 + np.arange(59)) % 7).astype(np.int64), minlength=7
    )
    assert per_weekday[5:].mean() < 0.7 * per_weekday[:5].mean()  # weekend_factor = 0.55


def test_smoke_calibration_roughly_on_target() -> None:
    trace = synthesise(load_profile("smoke"), SynthOptions(sessions=1500))
    fig = calibration(trace).overall
    assert fig.share_ge_95 is not None and 0.70 <= fig.share_ge_95 <= 0.80
    assert fig.share_lt_50 is not None and 0.01 <= fig.share_lt_50 <= 0.05
    assert fig.mean_per_request is not None and 0.85 <= fig.mean_per_request <= 0.93


# ------------------------------------------------------------------ command


def test_cli_writes_a_trace_and_prints_figures(tmp_path: Path) -> None:
    out = tmp_path / "smoke.parquet"
    result = CliRunner().invoke(synth, ["--profile", "smoke", "-o", str(out), "--weekly"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"wrote {out}: ") and "requests in" in lines[0]
    assert ">=95%" in lines[1] and "<50%" in lines[1] and "mean" in lines[1]
    assert lines[2].startswith("week")
    assert read_trace(out).num_requests > 100

    quiet = CliRunner().invoke(
        synth, ["--profile", "smoke", "-o", str(out), "-q", "--requests", "50"]
    )
    assert quiet.exit_code == 0 and len(quiet.output.splitlines()) == 1
    assert read_trace(out).num_requests == 50


def test_cli_bad_input_raises_user_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        synth,
        ["--profile", "smoke", "-o", str(tmp_path / "x.parquet"), "--sessions", "2", "--rate", "1"],
    )
    assert isinstance(result.exception, UserError)
    assert not (tmp_path / "x.parquet").exists()


def test_profile_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(_smoke_text().replace('name = "smoke"', 'name = "mine"'))
    assert load_profile(path).name == "mine"
    assert load_profile(str(path)).name == "mine"
