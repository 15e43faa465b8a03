"""Experiments measured by short replays through the reference servers (E4–E6, E8, E9, E11).

Owns running ``pddbench replay`` as a child process (the same command a user types, so
the replay path is the real one) once per scenario into ``<out>/runs/<scenario>/`` —
shared by every experiment of one ``experiment run`` — and reading the run folders back
through the analysis (metrics registry) into :class:`Measurement` objects.

Without ``--emulate`` the replays run with ``--no-emulation`` (servers on loopback, no
WAN between datacenters): every measurement says so (``wan_emulated=False``), and a
WAN-dependent experiment is then judged *inconclusive*, never *reproduced*.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pddbench.errors import UserError
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.summary import RunAnalysis, analyze_run
from pddbench.harness.experiments.checks import bootstrap_ci
from pddbench.harness.experiments.model import (
    Experiment,
    Measurement,
    RunContext,
    Series,
    Value,
)
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest, RunStatus

QUICK_REQUESTS = 60
FULL_REQUESTS = 400
REPLAY_TIMEOUT_S = 1800  # one child (replay, ladder); a full replay gets FULL_TIMEOUT_S
FULL_TIMEOUT_S = 4 * 3600  # 400 requests over a harsh sweep point (E12) run for hours
SPEEDUP = 4


@dataclass(frozen=True)
class ReplayRun:
    """One finished replay: its folder (relative to the out root), records and analysis."""

    scenario: str
    rel: str
    records: RecordSet
    analysis: RunAnalysis

    @property
    def emulated(self) -> bool:
        status = self.analysis.manifest.emulation if self.analysis.manifest else None
        return status is not None and not status.missing

    def ok(self) -> RecordSet:
        return self.records.subset(self.records.ok)

    def metric(self, key: str) -> float:
        return float(self.analysis.metrics.value(key))


def replay_trace(root: Path, ctx: RunContext) -> Path:
    if ctx.trace is not None:
        return ctx.trace
    path = root / "runs" / "smoke.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        child(["trace", "synth", "--profile", "smoke", "-o", str(path)], root)
    return path


def child(
    args: list[str], root: Path, ok: tuple[int, ...] = (0, 1), timeout_s: float = REPLAY_TIMEOUT_S
) -> None:
    cmd = [sys.executable, "-m", "pddbench", *args]
    log = root / "runs" / "replay.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise UserError(
                f"`pddbench {' '.join(args[:2])}` ran past {timeout_s:g} s; see {log}"
            ) from None
    if proc.returncode not in ok:  # 1: some requests failed, recorded in the run
        raise UserError(
            f"`pddbench {' '.join(args[:2])}` failed (exit {proc.returncode}); see {log}"
        )


# a run that ended (some requests may have failed, recorded); failed / running ones do not count
FINISHED = (RunStatus.COMPLETE, RunStatus.INCOMPLETE, RunStatus.RECOVERED)


def _manifests(folder: Path) -> list[tuple[Path, RunManifest]]:
    if not folder.exists():
        return []
    found = sorted(p for p in folder.iterdir() if RunPaths(p).manifest.exists())
    return [(p, RunManifest.load(p)) for p in found]


def _run_folders(folder: Path) -> list[Path]:
    """The finished runs in ``folder``, oldest first (a refused or crashed run is skipped)."""
    return [p for p, m in _manifests(folder) if m.status in FINISHED]


def replay(
    scenario: str, ctx: RunContext, source: str | None = None, extra: tuple[str, ...] = ()
) -> ReplayRun:
    """The run of ``scenario`` under this out root, replaying it first when absent.

    ``source``: the scenario file to deploy when it is not the built-in ``scenario``
    itself (a sweep point); the run folder and label stay ``scenario``. ``extra``: more
    ``pddbench replay`` options. A replay that ends without a finished run (refused, e.g.
    by its link probes) is a :class:`UserError` carrying the run's own error."""
    root = ctx.out.parent
    folder = root / "runs" / scenario
    runs = _run_folders(folder)
    if not runs:
        trace = replay_trace(root, ctx)
        ctx.progress(f"replaying {scenario} ({'quick' if ctx.quick else 'full'})")
        n = QUICK_REQUESTS if ctx.quick else FULL_REQUESTS
        args = [
            "replay",
            "--trace",
            str(trace),
            "--scenario",
            source or scenario,
            "--out",
            str(folder),
            "--label",
            scenario,
            "--max-requests",
            str(n),
            "--speedup",
            str(SPEEDUP),
        ]
        if not ctx.emulate:
            args.append("--no-emulation")
        child([*args, *extra], root, timeout_s=REPLAY_TIMEOUT_S if ctx.quick else FULL_TIMEOUT_S)
        runs = _run_folders(folder)
        if not runs:
            tried = _manifests(folder)
            why = tried[-1][1].error if tried and tried[-1][1].error else "no run folder"
            raise UserError(f"replay of {scenario} did not finish: {why} (in {folder})")
    run = load_run(runs[-1], token_times=False)
    return ReplayRun(scenario, str(runs[-1].relative_to(root)), run.records, analyze_run(run))


def measurement(
    exp: Experiment,
    ctx: RunContext,
    runs: list[ReplayRun],
    values: list[Value],
    series: list[Series] | None = None,
    notes: list[str] | None = None,
) -> Measurement:
    wan = all(r.emulated for r in runs)
    labels = [] if wan else ["WAN not emulated (--no-emulation: servers on loopback)"]
    return exp.measured(
        ctx,
        values,
        series=series or [],
        runs=[r.rel for r in runs],
        labels=labels,
        wan_emulated=wan,
        notes=[f"{r.scenario}: {r.ok().n} ok requests" for r in runs] + (notes or []),
    )


def pct_value(name: str, values: np.ndarray, q: float, unit: str = "s") -> Value:
    """Percentile ``q`` of ``values`` with a bootstrap 95 % interval."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Value(name=name, value=float("nan"), unit=unit)
    low, high = bootstrap_ci(values, lambda v: float(np.percentile(v, q)))
    return Value(name=name, value=float(np.percentile(values, q)), unit=unit, low=low, high=high)


def ttft(run: ReplayRun) -> np.ndarray:
    return run.ok().col("ttft_s")


def _share(rows: np.ndarray) -> float:
    return float(rows[:, 0].sum() / rows[:, 1].sum()) if rows[:, 1].sum() > 0 else float("nan")


def ttft_values(runs: dict[str, ReplayRun], qs: tuple[int, ...] = (50, 99)) -> list[Value]:
    """``<name>_p<q>`` TTFT percentiles with intervals, percentile by percentile."""
    return [pct_value(f"{name}_p{q}", ttft(r), q) for q in qs for name, r in runs.items()]


def run_e4(exp: Experiment, ctx: RunContext) -> Measurement:
    same, cross = replay("same-dc-pd", ctx), replay("cross-dc-pd", ctx)
    values = ttft_values({"same": same, "cross": cross})
    values.append(Value(name="p50_gap", value=values[1].value - values[0].value, unit="s"))
    return measurement(exp, ctx, [same, cross], values, _cdfs([same, cross]))


def run_e5(exp: Experiment, ctx: RunContext) -> Measurement:
    cross, pdd = replay("cross-dc-pd", ctx), replay("pdd", ctx)
    values = ttft_values({"cross": cross, "pdd": pdd})
    for q, (base, new) in (("50", values[:2]), ("99", values[2:4])):
        values.append(Value(name=f"p{q}_change", value=new.value / base.value - 1,
                            unit="fraction"))  # fmt: skip
    return measurement(exp, ctx, [cross, pdd], values, _cdfs([cross, pdd]))


def run_e6(exp: Experiment, ctx: RunContext) -> Measurement:
    pdd = replay("pdd", ctx)
    ok = pdd.ok()
    rows = np.column_stack([np.nan_to_num(ok.col("relay_tokens")), ok.col("output_tokens")])
    low, high = bootstrap_ci(rows, _share)
    values = [
        Value(
            name="rld_share",
            value=pdd.metric("rld_token_share"),
            unit="fraction",
            low=low,
            high=high,
        ),
        Value(name="relayed_requests", value=pdd.metric("relayed_share"), unit="fraction"),
    ]
    return measurement(exp, ctx, [pdd], values, notes=["interval: bootstrap over ok requests"])


def run_e8(exp: Experiment, ctx: RunContext) -> Measurement:
    runs = [replay(s, ctx) for s in ("pdd-one-shot", "pdd-catch-up", "pdd")]
    values = []
    for r, key in zip(runs, ("one_shot", "catch_up", "adaptive"), strict=True):
        ok = r.ok()
        relay = ok.col("relay_tokens")
        relay = relay[np.isfinite(relay) & (relay > 0)]
        values.append(
            Value(
                name=f"{key}_rld_tokens",
                value=float(relay.mean()) if relay.size else float("nan"),
                unit="tokens",
            )
        )
        values.append(
            Value(
                name=f"{key}_handoff_itl_max",
                unit="s",
                value=r.metric("handoff_itl_max")
                if "handoff_itl_max" in r.analysis.metrics
                else float("nan"),
            )
        )
    return measurement(
        exp,
        ctx,
        runs,
        values,
        notes=["RLD occupancy: mean tokens RLD generated per relayed request"],
    )


def _halves(run: ReplayRun) -> tuple[np.ndarray, np.ndarray]:
    ok = run.ok()
    t = ok.col("intended_send_s")
    mid = float(np.median(t)) if t.size else 0.0
    return t < mid, t >= mid


def run_e9(exp: Experiment, ctx: RunContext) -> Measurement:
    only, pdd = replay("pdd-rld-only", ctx), replay("pdd", ctx)
    values = []
    series = []
    for r, key in ((only, "rld_only"), (pdd, "pdd")):
        ok = r.ok()
        first, second = _halves(r)
        relayed = ok.relayed.astype(float)
        rep = ok.col("cached_tokens_reported")
        inp = ok.col("input_tokens")
        with np.errstate(divide="ignore", invalid="ignore"):
            md_hit = np.where(inp > 0, rep / inp, np.nan)
        for half, mask in (("first", first), ("second", second)):
            values.append(
                Value(
                    name=f"{key}_relayed_{half}",
                    unit="fraction",
                    value=float(relayed[mask].mean()) if mask.any() else float("nan"),
                )
            )
            values.append(
                Value(
                    name=f"{key}_md_hit_{half}",
                    unit="fraction",
                    value=float(np.nanmean(md_hit[mask])) if mask.any() else float("nan"),
                )
            )
        series.append(
            Series(
                label=f"{r.scenario}: relayed share",
                x=[1.0, 2.0],
                y=[values[-4].value, values[-2].value],
                x_name="half of the run",
                y_name="share of requests via RLD",
            )
        )
    return measurement(
        exp,
        ctx,
        [only, pdd],
        values,
        series,
        notes=["MD hit: server-reported cached tokens / input tokens"],
    )


def run_e11(exp: Experiment, ctx: RunContext) -> Measurement:
    off, on = replay("cross-dc-pd", ctx), replay("cross-dc-pd-drc", ctx)
    values = ttft_values({"off": off, "on": on}, (50,))
    for key, tag, unit in (("wan_bytes", "wan_bytes", "B"), ("tps", "output_tps", "tokens/s")):
        values += [Value(name=f"{n}_{key}", value=r.metric(tag), unit=unit)
                   for n, r in (("off", off), ("on", on))]  # fmt: skip
    return measurement(exp, ctx, [off, on], values, _cdfs([off, on]))


def _cdfs(runs: list[ReplayRun]) -> list[Series]:
    out = []
    for r in runs:
        v = np.sort(ttft(r)[np.isfinite(ttft(r))])
        if v.size:
            out.append(
                Series(
                    label=r.scenario,
                    x=v.tolist(),
                    y=(np.arange(1, v.size + 1) / v.size).tolist(),
                    x_name="TTFT (s)",
                    y_name="fraction of requests",
                )
            )
    return out
