"""ReplayOptions is the one options model: the click options are checked against it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click
import pytest

from pddbench.harness.cli.options import OPTION_FIELDS, SCENARIO_FIELDS, selection_options
from pddbench.harness.cli.replay import replay
from pddbench.harness.config.nightly import ReplaySettings
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.replay_text import build_options

NON_DEFAULT: dict[str, Any] = {
    "window": "1m/2m",
    "sample": 0.5,
    "speedup": 3.0,
    "max_requests": 7,
    "seed": 5,
    "think_policy": "zero",
    "on_error": "abort-session",
    "api": "sglang",
    "model": "m",
    "max_concurrency": 4,
    "timeout": "1m",
    "stall_timeout": "5s",
    "duration": "30s",
    "token_times": True,
}


def _command() -> click.Command:
    return click.command()(selection_options(lambda **_: None))


def _params() -> dict[str, click.Parameter]:
    return {p.name: p for p in _command().params if p.name}


def _defaults() -> dict[str, Any]:
    """What the command passes when no option is given."""
    return _command().make_context("replay", []).params


def _leaves(obj: object, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_leaves(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def test_every_option_maps_to_model_fields_and_every_field_has_a_source() -> None:
    assert set(_params()) == set(OPTION_FIELDS)
    set_by_options = [p for paths in OPTION_FIELDS.values() for p in paths]
    assert len(set_by_options) == len(set(set_by_options))
    assert not set(set_by_options) & set(SCENARIO_FIELDS)
    assert set(set_by_options) | set(SCENARIO_FIELDS) == set(_leaves(ReplayOptions()))


def test_the_option_defaults_are_the_model_defaults() -> None:
    defaults = _defaults()
    assert build_options(**defaults) == ReplayOptions()
    for name, field in ReplaySettings.model_fields.items():  # the nightly config's [replay]
        assert name in OPTION_FIELDS and field.default == defaults[name], name


@pytest.mark.parametrize("name", sorted(OPTION_FIELDS))
def test_each_option_sets_exactly_its_fields(name: str) -> None:
    assert set(NON_DEFAULT) == set(OPTION_FIELDS)
    defaults = _defaults()
    base = _leaves(build_options(**defaults))
    changed = _leaves(build_options(**{**defaults, name: NON_DEFAULT[name]}))
    assert {k for k in base if base[k] != changed[k]} == set(OPTION_FIELDS[name])


def test_json_round_trip_is_the_same_model() -> None:
    defaults = _defaults()
    options = build_options(**{**defaults, **NON_DEFAULT})
    assert ReplayOptions.from_json(json.loads(json.dumps(options.to_json()))) == options
    with pytest.raises(ValueError, match="selection"):
        ReplayOptions.from_json({**options.to_json(), "selection": {"sample": 2.0}})


def test_replay_command_carries_the_shared_options() -> None:
    assert set(OPTION_FIELDS) <= {p.name for p in replay.params}
