"""``pddbench engines greedy``: deploy a real-engine PD/PDD scenario and check greedy
equivalence against a colocated instance (:mod:`pddbench.harness.engines.greedy`).

Owns choosing the prompts (a trace's first requests, materialised as the replay does),
bringing the scenario up (emulated WAN where it can, as a replay does) and writing
``greedy.json`` beside the deployment's logs. The comparison itself is not here.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.engines.greedy import GreedyCase, GreedySummary, compare
from pddbench.harness.rundir.folder import RunPaths
from pddbench.workloads.materialize import Materializer
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import read_trace


def greedy_cases(
    trace: Path, requests: int, max_tokens: int, vocab_size: int, first_id: int
) -> list[GreedyCase]:
    """The trace's first ``requests`` requests in arrival order (later turns of a session
    extend its earlier prompts, so prefix caches and partial transfers are exercised)."""
    table = read_trace(trace, for_replay=True).table.sort_by(Col.ARRIVAL)
    rows = table.slice(0, requests).to_pylist()
    cases = []
    for row in rows:
        m = Materializer(int(row[Col.BLOCK_SIZE]), vocab_size=vocab_size, first_id=first_id)
        rid = str(row[Col.REQUEST_ID])
        prompt = m.prompt(row[Col.BLOCK_HASHES], int(row[Col.INPUT_LENGTH]), request_id=rid)
        out = max(1, min(max_tokens, int(row[Col.OUTPUT_LENGTH] or max_tokens)))
        cases.append(GreedyCase(rid, prompt, out))
    return cases


def reference_instance(scenario: Scenario) -> str:
    """The colocated reference: the deployment's (first) prefill engine."""
    for engine in scenario.engines:
        if engine.role == "prefill":
            return engine.name
    raise UserError(
        f'scenario {scenario.name} has no engine with role = "prefill" to serve as the '
        "colocated reference (greedy checks are for real-engine PD/PDD scenarios)"
    )


def run_greedy(
    scenario: Scenario, cases: list[GreedyCase], out: Path, *, emulate: bool
) -> GreedySummary:
    from pddbench.harness.deploy.systems import deploy
    from pddbench.harness.drive.netns import run_in_client_netns

    if not scenario.engines:
        raise UserError(f"scenario {scenario.name} is not a real-engine deployment")
    reference = reference_instance(scenario)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    paths = RunPaths(out / f"{stamp}-greedy-{scenario.name}")
    paths.logs.mkdir(parents=True, exist_ok=True)
    model = scenario.client.model or ""
    with deploy(scenario, paths, emulate=emulate, check_probes=False) as (info, ns, ready):
        front, ref = info.front_door, info.instances[reference]

        def client() -> GreedySummary:
            ready()
            return asyncio.run(compare(scenario.name, front, ref, model, cases))

        summary = run_in_client_netns(ns, client)
    (paths.root / "greedy.json").write_text(json.dumps(summary.to_json(), indent=1))
    return summary
