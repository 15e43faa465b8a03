"""The deployments a sizing search may choose from: a scenario as a template, and its
candidates within a budget.

Owns :class:`RoleTemplate` (one role of a scenario's deployment: hardware, site, attention
dtype, decode-side cache, unit price), :class:`Candidate` (instances × chips per role, its
cost), :func:`template` (a scenario's roles), :func:`enumerate_candidates` (every
candidate within the budget whose instances hold the weights) and :func:`apply` (the
scenario with a candidate's instances in place of its own). Sans-IO: no twin, no files;
the bounds are :mod:`~pddbench.harness.sizing.bounds`' and the search's I/O is
:mod:`~pddbench.harness.sizing.search`'s.

A candidate keeps the template's roles, hardware and sites; it chooses how many instances
each role has and how many chips each of them gets (every instance of a role alike). Its
cost is Σ instances × chips × unit price + the scenario's line cost; it must lie within
``[min_share × budget, budget]`` (a deployment that leaves a tenth of the budget unused is
not an equal-cost one).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pddbench.errors import UserError
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.sizing.bounds import holds_weights
from pddbench.servers.config import Role

ROLE_SHORT = {
    Role.PREFILL: "P",
    Role.DECODE: "D",
    Role.MAIN_DECODE: "MD",
    Role.RELAY_DECODE: "RLD",
    Role.COLOCATED: "C",
}
ID_PREFIX = {"P": "p", "D": "d", "MD": "md", "RLD": "rld", "C": "c"}


@dataclass(frozen=True)
class RoleTemplate:
    """One role of the template: what its instances are, not how many."""

    role: Role
    hardware: str
    datacenter: str
    unit_price: float
    min_chips: int  # the fewest chips that hold the weights with KV room left
    max_instances: int
    fields: tuple[tuple[str, Any], ...]  # the template instance's other settings, kept

    @property
    def short(self) -> str:
        return ROLE_SHORT[self.role]


@dataclass(frozen=True)
class Candidate:
    """Instances × chips per role (in the template's role order) and the cost."""

    roles: tuple[RoleTemplate, ...]
    shape: tuple[tuple[int, int], ...]  # (instances, chips per instance) per role
    line_cost: float

    @property
    def cost(self) -> float:
        gpus = sum(n * c * r.unit_price for r, (n, c) in zip(self.roles, self.shape, strict=True))
        return gpus + self.line_cost

    @property
    def structure(self) -> tuple[int, ...]:
        """Instances per role (candidates alike in it differ only in chips)."""
        return tuple(n for n, _ in self.shape)

    def text(self) -> str:
        """e.g. ``P 2x22 h800-sxm + D 2x22 h800-sxm``."""
        return " + ".join(
            f"{r.short} {n}x{c} {r.hardware}"
            for r, (n, c) in zip(self.roles, self.shape, strict=True)
        )


def template(scenario: Scenario, *, max_instances: int = 4) -> tuple[list[RoleTemplate], float]:
    """The roles of a reference scenario's deployment and its line cost; a
    :class:`UserError` when it has no deployment or no cost model."""
    if scenario.deployment is None:
        raise UserError(f"{scenario.name}: sizing needs a reference [deployment]")
    if scenario.cost is None:
        raise UserError(f"{scenario.name}: sizing needs a [cost] table (unit prices)")
    dep = scenario.deployment_config
    prices = scenario.cost.unit_price
    roles: dict[Role, RoleTemplate] = {}
    for inst in dep.instances:
        if inst.role == Role.ROUTER or inst.role in roles:
            continue
        if inst.hardware not in prices:
            raise UserError(f"{scenario.name}: [cost] has no unit price for {inst.hardware}")
        dtype = inst.attention_dtype
        min_chips = next(
            (c for c in range(1, 1025) if holds_weights(inst.hardware, c, dep.model, dtype)),
            None,
        )
        if min_chips is None:
            raise UserError(f"{scenario.name}: {inst.hardware} cannot hold {dep.model}")
        kept = inst.model_dump(
            exclude={"id", "role", "address", "listen", "chips"}, exclude_unset=True
        )
        roles[inst.role] = RoleTemplate(
            role=inst.role,
            hardware=inst.hardware,
            datacenter=inst.datacenter,
            unit_price=prices[inst.hardware],
            min_chips=min_chips,
            # the relay decodes a small share of the tokens: one or two instances
            max_instances=2 if inst.role == Role.RELAY_DECODE else max_instances,
            fields=tuple(sorted(kept.items())),
        )
    return list(roles.values()), scenario.cost.line_cost


def describe(scenario: Scenario) -> str:
    """A deployment in a line, from its instances (``P 2x22 h800-sxm + D 22+21 h20``)."""
    dep = scenario.deployment_config
    parts: dict[Role, list[int]] = {}
    hw: dict[Role, str] = {}
    for inst in dep.instances:
        if inst.role in ROLE_SHORT:
            parts.setdefault(inst.role, []).append(inst.chips)
            hw[inst.role] = inst.hardware
    out = []
    for role, chips in parts.items():
        n = f"{len(chips)}x{chips[0]}" if len(set(chips)) == 1 else "+".join(map(str, chips))
        out.append(f"{ROLE_SHORT[role]} {n} {hw[role]}")
    return " + ".join(out)


def own_candidate(scenario: Scenario) -> Candidate:
    """The scenario's own deployment as a candidate (its first instance of each role
    gives the chips: the built-ins give every instance of a role alike, or nearly)."""
    roles, line = template(scenario)
    dep = scenario.deployment_config
    shape = []
    for r in roles:
        insts = [i for i in dep.instances if i.role == r.role]
        chips = round(sum(i.chips for i in insts) / len(insts))
        shape.append((len(insts), chips))
    return Candidate(tuple(roles), tuple(shape), line)


def enumerate_candidates(
    roles: Sequence[RoleTemplate],
    line_cost: float,
    budget: float,
    *,
    min_share: float = 0.9,
    chip_step: int = 1,
) -> Iterator[Candidate]:
    """Every candidate whose cost lies in ``[min_share × budget, budget]``."""
    if budget <= line_cost:
        raise UserError(f"a budget of {budget:g} does not pay for the line ({line_cost:g})")
    floor = min_share * budget
    per_role = [_role_options(r, budget - line_cost, chip_step) for r in roles]
    frozen = tuple(roles)
    for shape in itertools.product(*per_role):
        cost = line_cost + sum(n * c * r.unit_price for r, (n, c) in zip(roles, shape, strict=True))
        if floor <= cost <= budget + 1e-9:
            yield Candidate(frozen, shape, line_cost)


def _role_options(r: RoleTemplate, money: float, step: int) -> list[tuple[int, int]]:
    out = []
    for n in range(1, r.max_instances + 1):
        top = int(money // (n * r.unit_price))
        out.extend((n, c) for c in range(r.min_chips, top + 1, step))
    return out


def apply(scenario: Scenario, cand: Candidate, name: str | None = None) -> Scenario:
    """The scenario with the candidate's instances (ids ``p0``, ``d0``, ``md0``, ``rld0``…)
    in place of its own, the router kept; validated as a scenario file is."""
    data = scenario.model_dump(exclude_unset=True, mode="json")
    dep = dict(data["deployment"])
    routers = [i for i in dep["instances"] if i.get("role") == Role.ROUTER.value]
    insts: list[dict[str, Any]] = list(routers)
    for r, (n, c) in zip(cand.roles, cand.shape, strict=True):
        for k in range(n):
            inst = dict(r.fields)
            inst.update(id=f"{ID_PREFIX[r.short]}{k}", role=r.role.value, chips=c)
            insts.append(inst)
    dep["instances"] = insts
    data["deployment"] = dep
    data["name"] = name or scenario.name
    data["description"] = f"{scenario.name} sized: {cand.text()} (cost {cand.cost:.4g})"
    data.pop("faults", None)  # a fault names the template's instances
    try:
        return Scenario.model_validate(data)
    except ValueError as exc:
        raise UserError(
            f"{scenario.name}: candidate {cand.text()} is not a valid scenario: {exc}"
        ) from None
