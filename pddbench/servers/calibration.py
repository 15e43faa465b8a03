"""Calibration of the compute model against public serving measurements (sans-IO).

Owns loading ``profiles/calibration.toml`` — each row one published, measured serving point
(source, quoted figure, the exact setup) — and pricing that setup with
:func:`pddbench.servers.compute.step_cost`, so that the table *measured vs model vs ratio*
is computed, never typed in. ``bench/bench_calibration.py`` prints it, docs/calibration.md
explains it, and ``tests/servers/test_calibration.py`` asserts it.

A point describes one steady-state forward pass of a whole deployment unit (all its chips):

* ``prefill`` — ``tokens_per_chip`` prompt tokens per chip per step, cut into prompts of
  ``prompt_len`` with no cached prefix; throughput counts prompt tokens;
* ``decode`` — ``batch_per_chip`` sequences per chip at ``context`` tokens each; with
  speculative decoding (MTP) each sequence verifies ``draft_tokens`` tokens per step (an
  extend of that many tokens) and emits ``accept_len`` on average.

Points used to *fit* a parameter say so (``fitted``); a point the model misses by more than
±30 % carries a ``reason``. Never a PDD report result: those are what the benchmark must
reproduce, not inputs. No I/O beyond reading the package data file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

from pddbench.errors import UserError
from pddbench.servers import profiles
from pddbench.servers.compute import Machine, StepCost, StepShape, step_cost

BAND = (0.7, 1.3)  # model / measured within ±30 %


@dataclass(frozen=True)
class Point:
    id: str
    source: str
    url: str
    quote: str
    hardware: str
    chips: int
    model: str
    attention_dp: bool
    phase: str  # "prefill" | "decode"
    per: str  # "node" | "gpu": what the measured throughput is normalised to
    measured_tokens_per_s: float
    tokens_per_chip: int = 0
    prompt_len: int = 0
    batch_per_chip: int = 0
    context: int = 0
    draft_tokens: int = 1
    accept_len: float = 1.0
    attention_dtype: str = "bf16"
    fitted: bool = False
    reason: str = ""
    expected_ratio: float | None = None  # for rows with a reason: the ratio the docs explain


@dataclass(frozen=True)
class Row:
    point: Point
    model_tokens_per_s: float
    step: StepCost

    @property
    def ratio(self) -> float:
        return self.model_tokens_per_s / self.point.measured_tokens_per_s

    @property
    def within_band(self) -> bool:
        return BAND[0] <= self.ratio <= BAND[1]


def load_points() -> list[Point]:
    text = (
        resources.files("pddbench.servers")
        .joinpath("profiles", "calibration.toml")
        .read_text("utf-8")
    )
    out = []
    for raw in tomllib.loads(text).get("point", []):
        try:
            out.append(Point(**raw))
        except TypeError as exc:
            raise UserError(f"calibration.toml: bad point {raw.get('id')!r}: {exc}") from None
    return out


def machine_for(p: Point) -> Machine:
    return Machine(
        profiles.hardware(p.hardware),
        p.chips,
        profiles.model(p.model),
        attention_dp=p.attention_dp,
        attention_dtype=p.attention_dtype,
    )


def shape_for(p: Point) -> tuple[StepShape, float]:
    """The step a point describes, and the tokens it yields (prompt or output tokens)."""
    if p.phase == "prefill":
        prompts = max(1, p.tokens_per_chip * p.chips // p.prompt_len)
        shape = StepShape(prefill=((p.prompt_len, 0),) * prompts)
        return shape, float(prompts * p.prompt_len)
    batch = p.batch_per_chip * p.chips
    if p.draft_tokens > 1:
        shape = StepShape(extend=((p.draft_tokens, p.context),) * batch)
    else:
        shape = StepShape(decode_batch=batch, decode_context=batch * p.context)
    return shape, batch * p.accept_len


def evaluate(p: Point) -> Row:
    m = machine_for(p)
    shape, tokens = shape_for(p)
    cost = step_cost(m, shape)
    per_unit = p.chips / m.hardware.chips_per_node if p.per == "node" else p.chips
    return Row(p, tokens / cost.seconds / per_unit, cost)


def table() -> list[Row]:
    return [evaluate(p) for p in load_points()]
