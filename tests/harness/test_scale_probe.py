"""The automatic emulation scale, checked by probing (the decision; the probe is netem's)."""

from __future__ import annotations

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.deploy.scale_probe import Shortfall, choose_probed_scale, probed


def _carries_from(threshold: float, calls: list[float]):
    def measure(scale: float) -> list[Shortfall]:
        calls.append(scale)
        if scale >= threshold:
            return []
        return [Shortfall("wan a->b", 10_000 / scale * 0.6, 10_000 / scale, 38.0)]

    return measure


def test_the_automatic_scale_is_kept_when_it_carries() -> None:
    calls: list[float] = []
    scale, said = choose_probed_scale(20.0, _carries_from(20.0, calls))
    assert (scale, calls) == (20.0, [20.0])
    assert said == "probed: 1/20 carried every WAN direction"


def test_a_starved_host_steps_coarser_and_says_what_it_measured() -> None:
    calls: list[float] = []
    scale, said = choose_probed_scale(20.0, _carries_from(50.0, calls))
    assert (scale, calls) == (50.0, [20.0, 50.0])
    assert "1/20 carried wan a->b 300/500 Mbit/s, steal 38 %" in said


def test_at_most_two_steps_coarser() -> None:
    calls: list[float] = []
    scale, said = choose_probed_scale(20.0, _carries_from(1e9, calls))
    assert (scale, calls) == (100.0, [20.0, 50.0, 100.0])
    assert said.startswith("probed: no step carried") and said.endswith("kept the last")


def test_fixed_scales_and_networks_without_a_wan_are_not_probed() -> None:
    def never(_: str) -> None:
        raise AssertionError("no probe expected")

    fixed = load_scenario("pdd").model_copy(update={"emulation_scale": 100})
    assert probed(fixed, "nfqueue", echo=never).emulation_scale == 100
    single_site = probed(load_scenario("same-dc-pd"), "nfqueue", echo=never)
    assert single_site.emulation_scale == 20.0 and single_site.scale_source.startswith("auto")
