"""Calibration of the compute model against public serving measurements (sans-IO).

Owns loading ``profiles/calibration.toml`` — each row one published, measured serving point
(source, quoted figure, the setup, and its split: ``fit`` or ``test``) — and pricing that
setup with :func:`pddbench.servers.compute.step_cost`, so that the table *measured vs model*
is computed, never typed in; and the summary of the errors per split (median |error|, share
within ±30 %, the worst rows). ``bench/bench_calibration.py`` prints it, docs/calibration.md
explains it, and ``tests/servers/test_calibration.py`` asserts it.

A point describes one steady state of a whole deployment unit (all its chips):

* ``prefill`` — ``tokens_per_chip`` prompt tokens per chip per step, cut into prompts of
  ``prompt_len`` with no cached prefix; throughput counts prompt tokens;
* ``decode`` — ``batch`` sequences (or ``batch_per_chip`` per chip) at ``context`` tokens;
  with speculative decoding (MTP) each sequence verifies ``draft_tokens`` tokens per step (an
  extend of that many tokens) and emits ``accept_len`` on average, as the source states it;
* ``ttft`` — one prompt of ``prompt_len`` alone (batch 1), in one step;
* ``static`` — a static batch: ``batch`` prompts prefilled in one step, then
  ``output_len - 1`` decode steps over the growing context (TensorRT-LLM's session benchmark).

The error of a row is ``ratio - 1`` where ``ratio`` is the model's *speed* over the
measured one (tokens/s model / measured, or time measured / model): above 1 the model is too
fast. Test rows never set a parameter (the split is data, fixed before fitting). Never a
PDD report figure. No I/O beyond reading the package data file.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass
from importlib import resources

from pddbench.errors import UserError
from pddbench.servers import profiles
from pddbench.servers.compute import Machine, StepCost, StepShape, step_cost
from pddbench.servers.profiles import HardwareProfile

BAND = (0.7, 1.3)  # model / measured within ±30 %
PHASES = ("prefill", "decode", "ttft", "static")
METRICS = ("tokens_per_s", "tpot_ms", "ttft_ms")
SPLITS = ("fit", "test")


@dataclass(frozen=True)
class Point:
    id: str
    split: str  # "fit" (may set a parameter) | "test" (may not)
    source: str
    url: str
    quote: str
    hardware: str
    chips: int
    model: str
    attention_dp: bool
    phase: str
    measured: float
    metric: str = "tokens_per_s"
    per: str = "gpu"  # tokens_per_s normalised per "node" (8 GPUs), "gpu" or "instance"
    fit_for: str = ""
    derivation: str = ""
    assumed: str = ""
    tokens_per_chip: int = 0
    prompt_len: int = 0
    batch_per_chip: int = 0
    batch: int = 0
    context: int = 0
    output_len: int = 0
    draft_tokens: int = 1
    accept_len: float = 1.0
    attention_dtype: str = "bf16"
    overlap: bool = True  # False: the engine's CPU work between steps was not overlapped
    gqa_kv_shared: bool = True  # False: the decode kernel loads a KV head once per query head

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise UserError(f"calibration.toml: {self.id}: split must be fit or test")
        if self.phase not in PHASES:
            raise UserError(f"calibration.toml: {self.id}: phase must be one of {PHASES}")
        if self.metric not in METRICS:
            raise UserError(f"calibration.toml: {self.id}: metric must be one of {METRICS}")
        if self.split == "fit" and not self.fit_for:
            raise UserError(f"calibration.toml: {self.id}: a fit point says what it fits")

    @property
    def total_batch(self) -> int:
        return self.batch or self.batch_per_chip * self.chips

    @property
    def setup(self) -> str:
        """The setup in one line (model, chips, parallelism, shape, precision, MTP)."""
        par = "DP-attn" if self.attention_dp else "TP-attn"
        if self.phase == "prefill":
            shape = f"{self.tokens_per_chip} tok/chip, {self.prompt_len}-tok prompts"
        elif self.phase == "ttft":
            shape = f"1 prompt of {self.prompt_len}"
        elif self.phase == "static":
            shape = f"static batch {self.batch}, {self.prompt_len} in / {self.output_len} out"
        else:
            per = f"{self.batch_per_chip}/chip" if self.batch_per_chip else str(self.batch)
            shape = f"batch {per} at {self.context} ctx"
        mtp = ""
        if self.draft_tokens > 1:
            mtp = f", MTP {self.draft_tokens} (accept {self.accept_len})"
        ovl = ", no overlap" if not self.overlap else ""
        gqa = ", no GQA KV sharing" if not self.gqa_kv_shared else ""
        return (
            f"{self.model}, {self.chips} x {self.hardware} {par}, {shape}, "
            f"attn {self.attention_dtype}{mtp}{ovl}{gqa}"
        )


@dataclass(frozen=True)
class Row:
    point: Point
    model_value: float  # in the point's metric and normalisation
    step: StepCost  # the representative step (the decode step of a static batch)

    @property
    def ratio(self) -> float:
        """Model speed / measured speed (> 1: the model is too fast)."""
        p = self.point
        if p.metric == "tokens_per_s":
            return self.model_value / p.measured
        return p.measured / self.model_value

    @property
    def error(self) -> float:
        return self.ratio - 1.0

    @property
    def within_band(self) -> bool:
        return BAND[0] <= self.ratio <= BAND[1]


@dataclass(frozen=True)
class SplitSummary:
    split: str
    rows: int
    median_abs_error: float
    within_band_share: float
    worst: tuple[Row, ...]


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


Overrides = dict[str, HardwareProfile]  # hardware name -> profile to price with instead


def machine_for(p: Point, overrides: Overrides | None = None) -> Machine:
    hw = (overrides or {}).get(p.hardware) or profiles.hardware(p.hardware)
    md = profiles.model(p.model)
    reads = 1.0
    if not p.gqa_kv_shared:
        # a generation kernel without GQA sharing (TensorRT-LLM's masked MHA before XQA) loads
        # each KV head once per query head of its group; the share missing L2 reaches HBM
        reads += hw.gqa_reread_share * (md.query_heads_per_kv_head - 1)
    return Machine(
        hw,
        p.chips,
        md,
        attention_dp=p.attention_dp,
        attention_dtype=p.attention_dtype,
        kv_read_factor=reads,
    )


def _host_s(m: Machine, p: Point) -> float:
    """CPU time between steps that a non-overlapping scheduler leaves exposed."""
    return 0.0 if p.overlap else m.hardware.host_step_s


def _decode_shape(p: Point, batch: int, context_each: int) -> StepShape:
    if p.draft_tokens > 1:
        return StepShape(extend=((p.draft_tokens, context_each),) * batch)
    return StepShape(decode_batch=batch, decode_context=batch * context_each)


def shape_for(p: Point) -> tuple[StepShape, float]:
    """The steady step of a prefill or decode point, and the tokens it yields."""
    if p.phase == "prefill":
        prompts = max(1, p.tokens_per_chip * p.chips // p.prompt_len)
        return StepShape(prefill=((p.prompt_len, 0),) * prompts), float(prompts * p.prompt_len)
    if p.phase == "ttft":
        return StepShape(prefill=((p.prompt_len, 0),)), float(p.prompt_len)
    batch = p.total_batch
    return _decode_shape(p, batch, p.context), batch * p.accept_len


def _static(m: Machine, p: Point) -> tuple[float, StepCost]:
    """Seconds of a static batch: one prefill step, then output_len - 1 decode steps."""
    host = _host_s(m, p)
    first = step_cost(m, StepShape(prefill=((p.prompt_len, 0),) * p.batch))
    total = first.seconds + host
    mid = first
    for i in range(1, p.output_len):
        cost = step_cost(m, _decode_shape(p, p.batch, p.prompt_len + i))
        total += cost.seconds + host
        if i == p.output_len // 2:
            mid = cost
    return total, mid


def evaluate(p: Point, overrides: Overrides | None = None) -> Row:
    m = machine_for(p, overrides)
    if p.phase == "static":
        seconds, cost = _static(m, p)
        tokens = float(p.batch * p.output_len)
    else:
        shape, tokens = shape_for(p)
        cost = step_cost(m, shape)
        seconds = cost.seconds + _host_s(m, p)
    if p.metric == "tpot_ms":
        return Row(p, 1e3 * seconds / p.accept_len, cost)
    if p.metric == "ttft_ms":
        return Row(p, 1e3 * seconds, cost)
    per_unit = {
        "node": p.chips / m.hardware.chips_per_node,
        "gpu": float(p.chips),
        "instance": 1.0,
    }[p.per]
    return Row(p, tokens / seconds / per_unit, cost)


def table(overrides: Overrides | None = None, split: str | None = None) -> list[Row]:
    """Every point priced (or those of one split), optionally with other hardware profiles."""
    return [evaluate(p, overrides) for p in load_points() if split in (None, p.split)]


def summarise(rows: list[Row], split: str, worst: int = 5) -> SplitSummary:
    """Median |error|, share within the band and the worst rows of one split."""
    mine = [r for r in rows if r.point.split == split]
    if not mine:
        return SplitSummary(split, 0, 0.0, 0.0, ())
    errors = [abs(r.error) for r in mine]
    ranked = sorted(mine, key=lambda r: abs(r.error), reverse=True)
    return SplitSummary(
        split,
        len(mine),
        statistics.median(errors),
        sum(r.within_band for r in mine) / len(mine),
        tuple(ranked[:worst]),
    )
