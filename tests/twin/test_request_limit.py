"""The twin honours the client's request limit as the asyncio client does: a request still
unanswered that long after its send is recorded censored (``request_limit``), with what its
stream measured so far and no server timing, and its work is dropped on the instances."""

from __future__ import annotations

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.rundir.records import ErrorClass, Status
from pddbench.twin.run import run_twin

from .plans import hashes_for, plan


def test_a_request_past_the_limit_is_censored_with_its_tokens_so_far() -> None:
    sc = load_scenario("same-dc-pd").model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    reqs = plan(sessions=2, turns=1, out=2000)  # ~2,000 tokens at ~19 ms: ~40 s of decode
    free = run_twin(dep, net, reqs, hashes_for(dep.block_size))
    assert all(r.status == "ok" for r in free)
    longest = max(r.e2e_s or 0.0 for r in free)
    limit = longest / 2
    cut = run_twin(dep, net, reqs, hashes_for(dep.block_size), request_limit_s=limit)
    assert len(cut) == len(free)
    for r in cut:
        assert r.status == Status.CENSORED, r
        assert r.error_class == ErrorClass.REQUEST_LIMIT
        assert r.e2e_s is not None and abs(r.e2e_s - limit) < 1e-9
        assert 0 < r.output_tokens < r.expected_output_tokens  # what came before the cut
        assert r.server_timing is None and r.cached_tokens_reported is None
    # the limit changes nothing for a request that ends before it
    loose = run_twin(dep, net, reqs, hashes_for(dep.block_size), request_limit_s=2 * longest)
    assert [r.e2e_s for r in loose] == [r.e2e_s for r in free]
