"""Synthetic run folders (requests.parquet + manifest.json) for tests, benches and demos.

Builds records with the shape of a real replay of an agentic trace against three systems
— ``same-dc-pd`` (88 × A, RDMA KV transfer), ``cross-dc-pd`` (naive: full KV over the
WAN, no decode-side cache) and ``pdd`` (hit-rate-aware routing, RLD relay with a handoff
seam, decode-side cache) — using a crude closed-form latency model, NOT a simulation:

* sessions of ~``turns_mean`` turns arrive as a Poisson process; each turn is sent when
  the previous one ended plus a think/tool time; turn 0 hits only a shared system prompt,
  later turns hit 95-99.9 %, so ~75 % of requests hit > 95 % and a few % hit little;
* TTFT = queueing (grows with ``load_scale``) + prefill of the uncached tokens + the KV
  transfer the system needs (RDMA, the whole KV over the WAN, or only the uncached
  suffix / nothing for relayed requests); a heavy WAN tail for the naive baseline;
* TPOT 15-30 ms; relayed requests get a ~300 ms ITL spike at the handoff seam;
* a small share of errors, sessions aborted after a failure (``skipped``), requests
  still running at the end ``cancelled``.

It exists so that analysis and reports can be built and tested before (and without) the
replay; nothing in it is evidence about PDD.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pddbench.harness.config.sla import DEFAULT_SLA
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.harness.rundir.records import RECORDS_SCHEMA

SYSTEMS = ("same-dc-pd", "cross-dc-pd", "pdd")
KV_BYTES_PER_TOKEN = 50_000
WAN_GBPS = 10.0


@dataclass(frozen=True)
class SynthRun:
    """What to synthesise."""

    system: str = "pdd"
    requests: int = 5000
    seed: int = 0
    load_scale: float = 1.0
    base_rps: float = 8.0  # offered requests/s at load_scale 1
    turns_mean: float = 20.0
    token_times_share: float = 0.0  # share of ok requests that carry token_times_s
    error_share: float = 0.001
    run_id: str | None = None


_COST = {
    "same-dc-pd": {"unit_price": {"A": 1.0}, "gpus": {"A": 88}, "line_cost": 0.0},
    "cross-dc-pd": {
        "unit_price": {"A": 1.0, "B": 1.2},
        "gpus": {"A": 43, "B": 32},
        "line_cost": 0.3,
    },
    "pdd": {"unit_price": {"A": 1.0, "B": 1.2}, "gpus": {"A": 43, "B": 32}, "line_cost": 0.3},
}


def _segment_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum restarting at every index in ``starts`` (sorted, first 0)."""
    c = np.cumsum(values)
    excl = c - values
    base = np.repeat(excl[starts], np.diff(np.r_[starts, values.size]))
    return excl - base


def synth_table(spec: SynthRun) -> pa.Table:
    """Records of one synthetic run as an Arrow table with ``RECORDS_SCHEMA``."""
    if spec.system not in SYSTEMS:
        raise ValueError(f"unknown system {spec.system!r}; choose from {SYSTEMS}")
    rng = np.random.default_rng(spec.seed)
    n_target = spec.requests
    # --- sessions and turns
    n_sessions = max(1, round(n_target / spec.turns_mean))
    turns = np.maximum(1, rng.geometric(1.0 / spec.turns_mean, n_sessions))
    turns = turns[np.cumsum(turns) <= n_target * 1.5] if turns.sum() > n_target else turns
    n = int(turns.sum())
    session = np.repeat(np.arange(turns.size), turns)
    starts = np.r_[0, np.cumsum(turns)[:-1]]
    turn = np.arange(n) - np.repeat(starts, turns)
    # --- tokens and hits
    first_input = rng.integers(8_000, 60_000, turns.size)
    growth = rng.integers(800, 4_000, n)
    inp = np.minimum(np.repeat(first_input, turns) + _segment_cumsum(growth, starts), 128_000)
    system_prompt = rng.integers(2_000, 30_000, turns.size)
    hit = np.where(
        turn == 0,
        np.minimum(np.repeat(system_prompt, turns) / inp, 0.9),
        1.0 - np.minimum(growth / inp, 0.6) * rng.uniform(0.05, 1.0, n),
    )
    # a few later turns lose their cache (evicted) and hit little
    evicted = (turn > 0) & (rng.random(n) < 0.015)
    hit = np.where(evicted, rng.uniform(0.0, 0.9, n), hit)
    cached = np.floor(hit * inp / 16) * 16  # whole 16-token blocks
    uncached = inp - cached
    out = np.clip(rng.lognormal(np.log(150), 0.8, n), 1, 1000).astype(np.int64)
    # --- latency model
    load = spec.load_scale
    rho = min(0.97, 0.55 * load)
    queue = rng.exponential(0.25 * rho / (1 - rho), n)
    prefill = 0.25 + uncached * 40e-6 + inp * 14e-6
    wan_bw = WAN_GBPS * 1e9 / 8 * rng.lognormal(0.0, 0.25, n)  # bytes/s, jittery
    relay = np.zeros(n)
    wan = np.zeros(n)
    if spec.system == "same-dc-pd":
        transfer = 0.03 + uncached * KV_BYTES_PER_TOKEN / 50e9
        tpot = rng.lognormal(np.log(0.022), 0.1, n)
        pipeline = np.full(n, "P->D", dtype=object)
    elif spec.system == "cross-dc-pd":
        wan = inp * KV_BYTES_PER_TOKEN * 1.0  # the whole KV, no decode-side cache
        tail = rng.pareto(1.5, n) * 0.08 * (1.0 + 15.0 * (hit < 0.9))
        transfer = wan / wan_bw * (1.0 + tail)
        tpot = rng.lognormal(np.log(0.019), 0.12, n)
        pipeline = np.full(n, "P->D", dtype=object)
    else:  # pdd
        suffix_time = uncached * KV_BYTES_PER_TOKEN / wan_bw
        relayed = suffix_time > 0.5
        wan = uncached * KV_BYTES_PER_TOKEN + np.where(relayed, 1_500.0, 0.0)
        transfer = np.where(relayed, 0.04, suffix_time * (1.0 + rng.pareto(3.0, n) * 0.2))
        tpot = rng.lognormal(np.log(0.019), 0.12, n)
        relay = np.where(relayed, np.minimum(np.ceil((suffix_time + 0.3) / 0.026), out), 0)
        pipeline = np.where(relayed, "P->RLD->MD", "P->MD").astype(object)
    ttft = queue + prefill + transfer
    handoff_spike = np.where((relay > 0) & (relay < out), rng.normal(0.30, 0.005, n), 0.0)
    decode = tpot * np.maximum(out - 1, 0)
    e2e = ttft + decode + handoff_spike + 0.002
    think = rng.lognormal(np.log(3.0), 0.8, n)
    # --- time line: turn k is due when turn k-1 ended plus think time
    rate = spec.base_rps * load
    span = n / rate
    session_start = np.sort(rng.uniform(0.0, span, turns.size))
    offset = _segment_cumsum(e2e + think, starts)
    intended = np.repeat(session_start, turns) + offset
    lag = rng.exponential(0.0008, n)
    actual = intended + lag
    first = actual + ttft
    end = actual + e2e
    last = end - 0.002
    # --- outcomes
    status = np.full(n, "ok", dtype=object)
    error_class = np.full(n, None, dtype=object)
    failed = rng.random(n) < spec.error_share
    kinds = rng.choice(np.array(["http", "stream", "connect"], dtype=object), n)
    status[failed] = "error"
    error_class[failed] = kinds[failed]
    timed_out = ttft > 60.0
    status[timed_out] = "timeout"
    error_class[timed_out] = "timeout"
    # abort-session policy: turns after a failure are skipped
    bad = (status != "ok").astype(np.int64)
    bad_before = _segment_cumsum(bad, starts) > 0
    skipped = bad_before
    status[skipped] = "skipped"
    error_class[skipped] = "dependency"
    run_end = span * 1.05 + 60.0
    cancelled = (status == "ok") & (actual < run_end) & (end > run_end)
    status[cancelled] = "cancelled"
    error_class[cancelled] = "cancelled"
    keep = intended < run_end  # the replay never reached later turns
    ok = status == "ok"
    sent = ~skipped
    never_token = ((status == "error") & (error_class != "stream")) | timed_out
    end = np.where(cancelled, run_end, np.where(never_token, np.minimum(actual + 60, end), end))
    has_tokens = sent & ~never_token
    first_s = np.where(has_tokens, first, np.nan)
    last_s = np.where(ok, last, np.where(has_tokens, np.minimum(last, end), np.nan))
    out_tok = np.where(ok, out, np.where(has_tokens, np.maximum(1, out // 2), 0))
    tpot_col = np.where(ok & (out > 1), tpot, np.nan)
    itl_max = np.where(
        ok & (out > 1), np.maximum(tpot * rng.uniform(2.0, 4.0, n), tpot + handoff_spike), np.nan
    )
    decoder = "D" if spec.system == "same-dc-pd" else "MD"
    rid = np.array([f"r{spec.seed}-{i}" for i in range(n)], dtype=object)
    sid = np.array([f"s{spec.seed}-{s}" for s in session], dtype=object)
    parent = np.where(turn > 0, np.r_[None, rid[:-1]], None)
    reported = np.where(ok, np.floor(cached * rng.choice([1.0, 1.0, 1.0, 0.97], n)), np.nan)
    cols: dict[str, object] = {
        "request_id": rid,
        "session_id": sid,
        "turn_index": turn,
        "parent_request_id": parent,
        "intended_send_s": intended,
        "actual_send_s": np.where(sent, actual, np.nan),
        "first_token_s": first_s,
        "last_token_s": last_s,
        "end_s": np.where(sent, end, np.nan),
        "ttft_s": np.where(has_tokens, ttft, np.nan),
        "e2e_s": np.where(sent, end - actual, np.nan),
        "tpot_s": tpot_col,
        "itl_mean_s": tpot_col,
        "itl_p50_s": tpot_col * 0.97,
        "itl_p90_s": tpot_col * 1.2,
        "itl_p99_s": np.where(ok & (out > 1), np.minimum(tpot * 1.9, itl_max), np.nan),
        "itl_max_s": itl_max,
        "chunks": np.where(has_tokens, out_tok + 2, 0),
        "input_tokens": inp,
        "output_tokens": out_tok,
        "expected_output_tokens": out,
        "cached_tokens_theoretical": cached,
        "cached_tokens_reported": reported,
        "client_queue_s": np.zeros(n),
        "pipeline": np.where(sent, pipeline, None),
        "first_token_origin": np.where(sent, np.where(relay > 0, "RLD", decoder), None),
        "relay_tokens": np.where(sent & (spec.system == "pdd"), relay, np.nan),
        "handoff_mode": np.where(relay > 0, np.where(relay > 64, "catch-up", "one-shot"), None),
        "wan_bytes": np.where(sent, wan, np.nan),
        "integrity_ok": np.where(ok, True, None),
        "status": status,
        "error_class": error_class,
        "error_message": np.where(status != "ok", "synthetic failure", None),
        "server_timing": None,
        "agent_type": None,
    }
    arrays = []
    for f in RECORDS_SCHEMA:
        if f.name == "token_times_s":
            continue
        v = cols.get(f.name)  # columns a synthetic run does not model are null
        if v is None:
            arrays.append(pa.nulls(int(keep.sum()), f.type))
            continue
        v = np.asarray(v)[keep]
        if v.dtype == object:
            arrays.append(pa.array(v.tolist(), type=f.type))
        else:
            if pa.types.is_integer(f.type):
                mask = ~np.isfinite(v.astype(np.float64))
                arrays.append(
                    pa.array(
                        np.nan_to_num(v.astype(np.float64)).astype(np.int64), type=f.type, mask=mask
                    )
                )
            else:
                arrays.append(
                    pa.array(
                        v.astype(np.float64), type=f.type, mask=~np.isfinite(v.astype(np.float64))
                    )
                )
    arrays.append(_token_times(spec, rng, keep, ok, first_s, tpot, out, relay, handoff_spike))
    return pa.Table.from_arrays(arrays, schema=RECORDS_SCHEMA)


def _token_times(
    spec: SynthRun,
    rng: np.random.Generator,
    keep: np.ndarray,
    ok: np.ndarray,
    first: np.ndarray,
    tpot: np.ndarray,
    out: np.ndarray,
    relay: np.ndarray,
    spike: np.ndarray,
) -> pa.Array:
    idx = np.flatnonzero(keep)
    n = idx.size
    with_times = ok[idx] & (rng.random(n) < spec.token_times_share)
    if not with_times.any():
        return pa.nulls(n, pa.list_(pa.float64()))
    rows = idx[with_times]
    lengths = out[rows]
    total = int(lengths.sum())
    owner = np.repeat(np.arange(rows.size), lengths)
    pos = np.arange(total) - np.repeat(np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    gaps = tpot[rows][owner] * rng.lognormal(0.0, 0.15, total)
    gaps[pos == 0] = 0.0
    seam = (pos == relay[rows][owner]) & (relay[rows][owner] > 0)
    gaps[seam] += spike[rows][owner][seam]
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    times = first[rows][owner] + _segment_cumsum(gaps, starts) + gaps
    offsets = np.zeros(n + 1, dtype=np.int32)
    lens_all = np.zeros(n, dtype=np.int64)
    lens_all[with_times] = lengths
    offsets[1:] = np.cumsum(lens_all)
    return pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(times, pa.float64()), mask=pa.array(~with_times)
    )


def manifest_for(spec: SynthRun, table: pa.Table) -> RunManifest:
    """A plausible ``manifest.json`` for a synthetic run."""
    intended = table.column("intended_send_s").to_numpy(zero_copy_only=False)
    end = np.asarray(table.column("end_s").to_numpy(zero_copy_only=False), dtype=np.float64)
    duration = float(np.nanmax(end) - np.nanmin(intended)) if len(table) else 0.0
    run_id = spec.run_id or f"{spec.system}-x{spec.load_scale:g}-s{spec.seed}"
    return RunManifest(
        run_id=run_id,
        scenario={
            "name": spec.system,
            "sla": DEFAULT_SLA.model_dump(),
            "cost": _COST[spec.system],
            "load_scale": spec.load_scale,
        },
        trace={"name": "synthetic-agentic", "requests": len(table), "seed": spec.seed},
        started_at="2026-03-01T00:00:00Z",
        ended_at="2026-03-01T01:00:00Z",
        duration_s=duration,
        links=[]
        if spec.system == "same-dc-pd"
        else [
            {
                "link": "dcA-dcB",
                "rate_a_to_b_mbit": WAN_GBPS * 1000,
                "rtt_p50_ms": 20.1,
                "rtt_p99_ms": 24.9,
                "expected_rtt_p50_ms": 20.0,
                "expected_rtt_p99_ms": 25.0,
                "goodput_a_to_b_mbit": WAN_GBPS * 940,
                "loss_a_to_b_pct": 0.0,
            },
        ],
        synthetic=True,
    )


def write_run(folder: str | Path, spec: SynthRun) -> Path:
    """Write ``requests.parquet`` and ``manifest.json`` of ``spec`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = synth_table(spec)
    pq.write_table(table, RunPaths(folder).requests, compression="zstd")
    manifest_for(spec, table).save(folder)
    return folder
