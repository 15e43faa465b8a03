"""Which candidates a sizing search measures: ranked by the compute model's bound per unit
of cost, one per structure (instances per role), the template's own deployment beside.

Owns :class:`Ranked` (a candidate with its bounds) and :func:`shortlist`. Sans-IO: the
bounds are :mod:`~pddbench.harness.sizing.bounds`', the candidates
:mod:`~pddbench.harness.sizing.space`'s; nothing is run here.

The bound ignores queueing, misses beyond the mean and the handoffs, so it ranks but does
not choose: the twin measures the shortlist. Candidates alike in structure differ only in
how the chips are split, which the bound prices well (compute and KV room), so each
structure sends its best split; the shortlist is the ``top`` structures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pddbench.harness.config.scenario import Scenario
from pddbench.harness.sizing.bounds import (
    Decoding,
    Group,
    RoleBound,
    Workload,
    binding,
    deployment_bounds,
    role_bounds,
)
from pddbench.harness.sizing.space import Candidate, apply, describe, own_candidate


@dataclass(frozen=True)
class Ranked:
    """A candidate, its scenario and the compute model's bounds of it."""

    candidate: Candidate
    scenario: Scenario  # the candidate applied (the built-in: the scenario itself)
    bounds: tuple[RoleBound, ...]

    @property
    def cost(self) -> float:
        cost = self.scenario.cost_model
        return self.candidate.cost if cost is None else cost.total

    def text(self) -> str:
        return describe(self.scenario)

    @property
    def bound_rps(self) -> float:
        return binding(self.bounds).req_per_s

    @property
    def binding(self) -> RoleBound:
        return binding(self.bounds)

    @property
    def bound_per_cost(self) -> float:
        return self.bound_rps / self.cost


def wan_rates(scenario: Scenario) -> dict[tuple[str, str], float]:
    """(site, site) -> the line's rate in Mbit/s, from the scenario's ``[[network.links]]``."""
    net = scenario.network
    if net is None or not net.links:
        return {}
    return {(link.a, link.b): float(link.rate_mbit) for link in net.links}


def rank(
    scenario: Scenario,
    cand: Candidate,
    w: Workload,
    d: Decoding,
    wan: Mapping[tuple[str, str], float],
) -> Ranked:
    scen = apply(scenario, cand)
    return Ranked(cand, scen, tuple(deployment_bounds(scen.deployment_config, w, d, dict(wan))))


def shortlist(
    scenario: Scenario,
    candidates: Iterable[Candidate],
    w: Workload,
    d: Decoding,
    top: int,
) -> tuple[list[Ranked], Ranked, int]:
    """The ``top`` structures' best candidates by bound per cost (best first), the
    scenario's own deployment ranked alike, and how many candidates were priced."""
    wan = wan_rates(scenario)
    best: dict[tuple[int, ...], tuple[float, Candidate]] = {}
    priced = 0
    for cand in candidates:
        priced += 1
        key = cand.structure
        score = _bound_per_cost(scenario, cand, w, d, wan)
        if key not in best or score > best[key][0]:
            best[key] = (score, cand)
    chosen = sorted(best.values(), key=lambda sc: (-sc[0], sc[1].text()))[:top]
    ranked = [rank(scenario, c, w, d, wan) for _, c in chosen]
    own = Ranked(
        own_candidate(scenario),
        scenario,
        tuple(deployment_bounds(scenario.deployment_config, w, d, dict(wan))),
    )
    return ranked, own, priced


def _bound_per_cost(
    scenario: Scenario,
    cand: Candidate,
    w: Workload,
    d: Decoding,
    wan: Mapping[tuple[str, str], float],
) -> float:
    """The bound per cost without building a scenario (the enumeration's hot path)."""
    groups = [
        Group(
            role=r.role,
            hardware=r.hardware,
            datacenter=r.datacenter,
            instances=n,
            chips=c,
            **{k: v for k, v in r.fields if k in GROUP_FIELDS},
        )
        for r, (n, c) in zip(cand.roles, cand.shape, strict=True)
    ]
    rows = role_bounds(scenario.deployment_config.model, groups, w, d, dict(wan))
    return binding(rows).req_per_s / cand.cost


GROUP_FIELDS = ("attention_dtype", "attention_dp", "prefix_cache")
