"""The emulation scale chosen by probing: the automatic scale, checked on this host first.

``Scenario.resolved`` picks the smallest scale a shaping backend sustains from a declared
figure (:mod:`pddbench.netem.scale`). A host can carry less than that at run time:
measured on this project's 2-vCPU VM, the userspace delay stage carried 95 % of
500 Mbit/s on a quiet host and 45-70 % while the hypervisor woke its vCPUs late (26-43 %
steal during the flows), and the deploy's link check then refused the run. So before the
first system of a replay or a capacity search is deployed, an automatic scale is probed
on a throwaway copy of the scenario's network (no servers): the first step of
:data:`~pddbench.netem.scale.SCALE_STEPS` from the automatic one whose every WAN direction
carries :data:`CARRY_FRACTION` of its scaled rate is kept, at most :data:`MAX_COARSER`
steps coarser; the measurements go into ``scale_source``, which the manifest records.
Scenarios with the same network share one probe (and so one scale) per process. Fixed
scales (a number in the scenario) are never probed. Must not deploy servers or judge runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pddbench.harness.config.scenario import Scenario
from pddbench.netem.scale import SCALE_STEPS

CARRY_FRACTION = 0.9  # of each WAN direction's scaled rate (bench and netem probe: 90 %)
MAX_COARSER = 2  # 1/100 -> 1/200 -> 1/500 at most; past that the deploy's check decides


@dataclass(frozen=True)
class Shortfall:
    """One WAN direction that carried less than its share at a probed scale."""

    direction: str  # "wan a->b"
    goodput_mbit: float
    rate_mbit: float
    steal_pct: float

    def text(self) -> str:
        steal = f", steal {self.steal_pct:.0f} %" if self.steal_pct >= 1 else ""
        return f"{self.direction} {self.goodput_mbit:.0f}/{self.rate_mbit:.0f} Mbit/s{steal}"


# measure(scale) -> the shortfalls at that scale (empty: every direction carried)
Measure = Callable[[float], Sequence[Shortfall]]


def choose_probed_scale(first: float, measure: Measure) -> tuple[float, str]:
    """(scale, what the probes said): ``first``, or the first coarser step that carried."""
    steps = [s for s in SCALE_STEPS if s >= first][: MAX_COARSER + 1] or [first]
    said: list[str] = []
    for scale in steps:
        short = list(measure(scale))
        if not short:
            tried = f"; {'; '.join(said)}" if said else ""
            return scale, f"probed: 1/{scale:g} carried every WAN direction{tried}"
        said.append(f"1/{scale:g} carried " + ", ".join(s.text() for s in short))
    return steps[-1], "probed: no step carried (" + "; ".join(said) + "), kept the last"


def _measure_on_host(scenario: Scenario) -> Measure:
    """Probe ``scenario``'s network at a scale on a throwaway topology (I/O)."""
    from pddbench.netem.topology import Topology, new_run_id

    def measure(scale: float) -> list[Shortfall]:
        config = scenario.model_copy(update={"emulation_scale": scale}).network_config()
        with Topology.up(config, new_run_id(), label="scale probe") as topo:
            probes = topo.probe(samples=20, bulk_seconds=1.0)
        out = []
        for p in probes:
            for name, rate, good, loss in (
                ("a->b", p.rate_a_to_b_mbit, p.goodput_a_to_b_mbit, p.loss_a_to_b_pct),
                ("b->a", p.rate_b_to_a_mbit, p.goodput_b_to_a_mbit, p.loss_b_to_a_pct),
            ):
                if rate is None or good is None or loss > 0:
                    continue
                if good < CARRY_FRACTION * rate:
                    out.append(Shortfall(f"{p.link} {name}", good, rate, p.goodput_steal_pct))
        return out

    return measure


_PROBED: dict[str, tuple[float, str]] = {}  # network (as JSON) -> (scale, said)


def probed(scenario: Scenario, backend: str, *, echo: Callable[[str], None]) -> Scenario:
    """``scenario`` resolved for ``backend``, its automatic scale checked on this host."""
    if scenario.emulation_scale != "auto" or scenario.network is None:
        return scenario.resolved(backend)
    auto = scenario.resolved(backend)
    first = float(auto.emulation_scale)
    if not auto.network_config().links:  # no WAN link: nothing the scale could starve
        return auto
    network = scenario.network.model_dump(mode="json", exclude_unset=True)
    key = json.dumps([network, first], sort_keys=True)
    if key not in _PROBED:
        echo(f"pddbench: probing the automatic emulation scale 1/{first:g} on this host ...")
        _PROBED[key] = choose_probed_scale(first, _measure_on_host(auto))
        scale, said = _PROBED[key]
        if scale != first:
            echo(f"pddbench: emulation scale 1/{scale:g} ({said})")
    scale, said = _PROBED[key]
    return auto.model_copy(
        update={
            "emulation_scale": scale,
            "scale_source": f"{said} (automatic choice: {auto.scale_source})",
        }
    )
