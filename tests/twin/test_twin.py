"""The virtual-time twin: deterministic, sane on an idle system, and sharing its decisions
with the servers (one rule, patched in its one place, changes both backends)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.rundir.records import journal_line
from pddbench.servers import flow_core
from pddbench.servers.compute import prefill_seconds
from pddbench.servers.config import DeploymentConfig, Role
from pddbench.servers.routing import Pipeline, PipelineDecision, PipelinePolicy
from pddbench.twin.links import CONTROL_BYTES
from pddbench.twin.run import Twin, run_twin

from ..servers.helpers import complete, deployment, running
from .plans import hashes_for, plan


def scenario(name: str):
    sc = load_scenario(name).model_copy(update={"emulation_scale": 1.0})
    return sc.deployment_config, sc.network_config()


def always_relay(dep: DeploymentConfig) -> DeploymentConfig:
    routing = dep.routing.model_copy(update={"pipeline_policy": PipelinePolicy.ALWAYS_RELAY})
    return dep.model_copy(update={"routing": routing})


@pytest.mark.parametrize("name", ["same-dc-pd", "cross-dc-pd", "pdd", "pdd-relay", "pdd-kv"])
def test_same_replay_twice_gives_identical_records(name: str) -> None:
    dep, net = scenario({"pdd-relay": "pdd-catch-up", "pdd-kv": "pdd-kv-handoff"}.get(name, name))
    if name in ("pdd-relay", "pdd-kv"):
        dep = always_relay(dep)  # every request through RLD and a handoff
    runs = [
        [journal_line(r) for r in run_twin(dep, net, plan(), hashes_for(dep.block_size))]
        for _ in range(2)
    ]
    assert len(runs[0]) == 18
    assert all('"status":"ok"' in line for line in runs[0]), runs[0][0]
    assert runs[0] == runs[1]
    if name in ("pdd-relay", "pdd-kv"):
        assert all('"pipeline":"P->RLD->MD"' in line for line in runs[0])
        assert all('"first_token_origin":"RLD"' in line for line in runs[0])


def test_idle_system_ttft_is_prefill_plus_the_links() -> None:
    """One request on an idle deployment: TTFT = the compute model's prefill + each hop."""
    for name in ("colocated", "same-dc-pd"):
        dep, net = scenario(name)
        [rec] = run_twin(dep, net, plan(1, 1), hashes_for(dep.block_size))
        twin = Twin(dep, net)
        computes = dep.by_role(Role.COLOCATED) or dep.by_role(Role.PREFILL)
        p = computes[0]
        prefill = prefill_seconds(dep.machine(p), 8000, 0, dep.scheduler_for(p).chunk_tokens)
        path = twin.net.params(dep.router, p)  # in-DC: no jitter, every hop alike
        hop = path.delay_s + CONTROL_BYTES / path.rate_bytes_per_s
        if name == "colocated":  # client -> router -> C, first token C -> router -> client
            expected = prefill + 4 * hop
        else:  # ... + router -> D, D's reservation back, router -> P, then P's KV to D
            kv = 8000 * dep.machine(p).model.kv_bytes_per_token / path.bulk_rate  # TCP payload
            expected = prefill + 6 * hop + kv + path.delay_s
        assert rec.ttft_s == pytest.approx(expected, rel=1e-9), name
        assert rec.ttft_prefill_s == pytest.approx(prefill, rel=1e-9)


def _force_relay(monkeypatch: pytest.MonkeyPatch) -> None:
    real = flow_core.decide_pipeline

    def relay(x: Any, policy: Any) -> PipelineDecision:
        d = real(x, policy)
        return PipelineDecision(Pipeline.RELAY, d.predicted_wan_s, d.predicted_ttft_s, "patched")

    monkeypatch.setattr(flow_core, "decide_pipeline", relay)


def _spec() -> dict[str, Any]:
    return deployment("pdd", {"prefill": 1, "relay-decode": 1, "main-decode": 1})


def _server_pipeline() -> str:
    async def main() -> str:
        import aiohttp

        async with running(_spec()) as (_, url, _), aiohttp.ClientSession() as http:
            c = await complete(http, url, list(range(1000, 1600)), 24, "shared-0")
            assert c.pdd is not None, c.error
            return str(c.pdd["pipeline"])

    return asyncio.run(main())


def _twin_pipelines() -> set[str | None]:
    dep = DeploymentConfig.model_validate(_spec())
    recs = run_twin(dep, None, plan(2, 1, first=600, out=24), hashes_for(dep.block_size))
    return {r.pipeline for r in recs}


def test_pipeline_rule_patched_in_its_one_place_changes_both_backends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _server_pipeline() == "P->MD"
    assert _twin_pipelines() == {"P->MD"}
    _force_relay(monkeypatch)
    assert _server_pipeline() == "P->RLD->MD"
    assert _twin_pipelines() == {"P->RLD->MD"}


def test_server_hashes_share_exactly_the_trace_prefix() -> None:
    """A child turn re-sending its parent's blocks shares their server blocks, a partial
    last trace block's full server blocks included; the rest is the request's own."""
    from pddbench.twin.prompts import server_hashes

    parent = server_hashes([11, 12], 512, 64, 512 + 200, row=0)  # 1 full + a partial block
    child = server_hashes([11, 12, 13], 512, 64, 3 * 512, row=1)
    other = server_hashes([21, 22, 23], 512, 64, 3 * 512, row=2)
    assert len(parent) == (512 + 200) // 64 and len(child) == 24
    assert parent == child[: len(parent)]
    assert not set(other) & set(child)
    assert server_hashes([5], 64, 128, 1000, row=3)[1:] != server_hashes([5], 64, 128, 1000, 4)[1:]


def test_records_stream_to_a_callback_as_they_complete() -> None:
    """on_record gets every record, in completion order, and nothing is kept."""
    dep, net = scenario("pdd")
    kept = run_twin(dep, net, plan(), hashes_for(dep.block_size))
    streamed: list[str] = []
    back = run_twin(
        dep,
        net,
        plan(),
        hashes_for(dep.block_size),
        on_record=lambda r: streamed.append(journal_line(r)),
    )
    assert back == []
    assert streamed == [journal_line(r) for r in kept]
