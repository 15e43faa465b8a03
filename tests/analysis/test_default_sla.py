"""One default SLA: every built-in scenario uses it, or its [sla] table says why not."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from pddbench.harness.config.sla import DEFAULT_SLA, sla_from_mapping

SCENARIOS = sorted(
    p.name for p in resources.files("pddbench.scenarios").iterdir() if p.name.endswith(".toml")
)


def test_default_sla_holds_decode_inside_the_10_to_30_ms_band() -> None:
    assert DEFAULT_SLA.tpot_s is not None and 0.010 <= DEFAULT_SLA.tpot_s <= 0.030
    assert DEFAULT_SLA.ttft_s and DEFAULT_SLA.e2e_s and DEFAULT_SLA.target_pct == 99.0


@pytest.mark.parametrize("name", SCENARIOS)
def test_builtin_scenario_uses_the_default_sla_or_says_why_not(name: str) -> None:
    text = resources.files("pddbench.scenarios").joinpath(name).read_text("utf-8")
    table = tomllib.loads(text).get("sla")
    sla = sla_from_mapping(table, where=name)
    if sla != DEFAULT_SLA:
        head = next(line for line in text.splitlines() if line.startswith("[sla]"))
        assert "not the default SLA" in head, f"{name}: an own SLA must say why"


def test_a_scenario_sla_overrides_the_default_field_by_field() -> None:
    assert sla_from_mapping({}, where="x") == DEFAULT_SLA
    own = sla_from_mapping({"ttft_s": 2.0}, where="x")
    assert own.ttft_s == 2.0 and own.tpot_s == DEFAULT_SLA.tpot_s
