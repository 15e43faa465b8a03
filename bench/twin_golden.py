"""Golden equivalence of the virtual-time twin: a digest of every record of fixed replays.

Replays small fixed plans through :func:`pddbench.twin.run.run_twin` — the first
``0.02`` day of the jan-feb profile at x10 for same-dc-pd, cross-dc-pd, pdd and the
handoff ablations, a heavier window (x100) that makes pdd relay, pdd with little KV
memory (its prefix caches and the router's affinity index evict), and the twin tests'
session plans (:mod:`tests.twin.plans`) through always-relay ablations — and digests
every record's journal line (every :class:`~pddbench.harness.rundir.records.RequestRecord`
field, ``token_times_s`` included) in completion order. A speed change must leave every
digest as it was; a deliberate change of a deterministic draw re-records them
(``--record``) in its own commit, with the shift of the figures it prints.

    .venv/bin/python bench/twin_golden.py            # check against bench/twin_golden.json
    .venv/bin/python bench/twin_golden.py --record   # (re)write it
    .venv/bin/python bench/twin_golden.py --only pdd # a subset (names contain the string)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pddbench.harness.config.replay import Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.records import RequestRecord, journal_line
from pddbench.netem.topology_config import NetworkConfig
from pddbench.servers.config import DeploymentConfig, Role
from pddbench.servers.routing import PipelinePolicy
from pddbench.twin.prompts import table_hashes
from pddbench.twin.run import run_twin
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

GOLDEN = Path(__file__).with_name("twin_golden.json")
TRACE_SCENARIOS = (
    "same-dc-pd",
    "cross-dc-pd",
    "pdd",
    "pdd-catch-up",
    "pdd-kv-handoff",
    "pdd-one-shot",
    "pdd-always-relay",
    "pdd-rld-only",
)


@dataclass(frozen=True)
class Case:
    name: str
    scenario: str
    days: float = 0.02
    speedup: float = 10.0
    always_relay: bool = False
    sessions_plan: bool = False  # the twin tests' plan instead of the trace
    small_kv: bool = False  # P and MD hold ~1M tokens of KV: the prefix caches evict


CASES = (
    *(Case(f"{s}@x10", s) for s in TRACE_SCENARIOS),
    Case("pdd@x100", "pdd", days=0.05, speedup=100.0),
    Case("pdd-kv-handoff@x100", "pdd-kv-handoff", days=0.05, speedup=100.0),
    Case("pdd-small-kv@x10", "pdd", days=0.05, small_kv=True),
    Case("plan:pdd-catch-up-relay", "pdd-catch-up", always_relay=True, sessions_plan=True),
    Case("plan:pdd-kv-relay", "pdd-kv-handoff", always_relay=True, sessions_plan=True),
    Case("plan:colocated", "colocated", sessions_plan=True),
)


def deployment(case: Case) -> tuple[DeploymentConfig, NetworkConfig | None]:
    sc = load_scenario(case.scenario).model_copy(update={"emulation_scale": 1.0})
    dep = sc.deployment_config
    if case.always_relay:
        routing = dep.routing.model_copy(update={"pipeline_policy": PipelinePolicy.ALWAYS_RELAY})
        dep = dep.model_copy(update={"routing": routing})
    if case.small_kv:  # reserve all but ~1M tokens of KV on P (27 H800) and MD (16 H20)
        reserve = {Role.PREFILL: 0.497, Role.MAIN_DECODE: 0.2926}
        instances = [
            i.model_copy(
                update={
                    "scheduler": dep.scheduler_for(i).model_copy(
                        update={"hbm_reserve_fraction": reserve[i.role]}
                    )
                }
            )
            if i.role in reserve
            else i
            for i in dep.instances
        ]
        dep = dep.model_copy(update={"instances": instances})
    return dep, sc.network_config()


_TRACES: dict[float, object] = {}


def plan_of(
    case: Case, block_size: int
) -> tuple[list[PlannedRequest], Callable[[PlannedRequest], list[int]]]:
    if case.sessions_plan:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.twin.plans import hashes_for, plan

        return plan(), hashes_for(block_size)
    table = _TRACES.get(case.days)
    if table is None:
        table = _TRACES[case.days] = synthesise(
            load_profile("jan-feb"), SynthOptions(days=case.days)
        ).table
    planned = plan_requests(table, Selection(speedup=case.speedup))  # type: ignore[arg-type]
    return planned, table_hashes(table, block_size)  # type: ignore[arg-type]


def figures(recs: list[RequestRecord]) -> dict[str, float]:
    """Headline figures, to show how far a deliberate change moves them."""
    ok = [r for r in recs if r.status == "ok"]
    out: dict[str, float] = {"records": len(recs), "ok": len(ok)}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        vals = np.array([getattr(r, name) for r in ok if getattr(r, name) is not None])
        for q in (50, 90, 99):
            out[f"{name[:-2]}_p{q}"] = float(np.percentile(vals, q)) if len(vals) else 0.0
    out["relay_tokens"] = sum(r.relay_tokens or 0 for r in ok)
    out["output_tokens"] = sum(r.output_tokens for r in ok)
    return out


def run_case(case: Case) -> dict[str, object]:
    dep, net = deployment(case)
    planned, hashes = plan_of(case, dep.block_size)
    t0 = time.perf_counter()
    recs = run_twin(dep, net, planned, hashes)
    wall = time.perf_counter() - t0
    h = hashlib.sha256()
    for r in recs:
        h.update(journal_line(r).encode())
    return {"digest": h.hexdigest(), "figures": figures(recs), "wall_s": round(wall, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="write the digests as the golden")
    ap.add_argument("--only", help="only the cases whose name contains this")
    args = ap.parse_args()
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    results: dict[str, dict[str, object]] = {}
    bad = 0
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        res = results[case.name] = run_case(case)
        old = golden.get(case.name)
        same = old is not None and old["digest"] == res["digest"]
        verdict = "same" if same else ("NEW" if old is None else "DIFFERENT")
        bad += not same and not args.record
        f = res["figures"]
        assert isinstance(f, dict)
        print(
            f"{case.name:26s} {verdict:9s} {f['records']:5.0f} records "
            f"TTFT p50/p99 {f['ttft_p50']:.4f}/{f['ttft_p99']:.4f} "
            f"TPOT p50/p99 {f['tpot_p50'] * 1e3:.3f}/{f['tpot_p99'] * 1e3:.3f} ms "
            f"E2E p50/p99 {f['e2e_p50']:.3f}/{f['e2e_p99']:.3f} "
            f"relay {f['relay_tokens']:.0f}/{f['output_tokens']:.0f} ({res['wall_s']} s)",
            flush=True,
        )
        if old is not None and not same:
            of = old["figures"]
            shift = {k: f"{of[k]:.6g} -> {v:.6g}" for k, v in f.items() if of.get(k) != v}
            print(f"    shift: {shift}")
    if args.record:
        golden.update(results)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(results)} digests in {GOLDEN}")
        return 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
