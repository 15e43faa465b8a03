"""The twin's link model fitted to this machine's emulated WAN: the parameter file and the fit.

Owns :class:`LinkModelFile` (what ``pddbench twin calibrate`` writes and ``--link-model``
loads: per WAN direction the fitted one-way delay, jitter and bulk rate, with what was
measured, when, on which host and kernel), the pure fit from measurements to parameters
(:func:`fit_link`), and folding the fit into a scenario's ``[network]``
(:meth:`LinkModelFile.network`), which is all the twin's link model reads; without a file
the twin uses the scenario's configured parameters.

The fit, per link and direction, from one :class:`~pddbench.netem.probe.LinkProbe` (a
UDP ping-pong's RTT quantiles, a steady bulk TCP goodput) and timed transfers on a warm
connection (:class:`TransferSample`, the sizes the trace's KV transfers have):

* **delay** — the RTT's median (symmetric jitter leaves it at the two delays' sum, the
  host's own stack and delay-stage costs included), split between the directions in the
  ratio of their configured delays (a ping-pong cannot tell the two apart; equal halves
  when neither has one);
* **jitter** — the RTT's standard deviation as the sum of two uniform jitters
  (``std² = (J_ab² + J_ba²) / 3``), split in the ratio of the configured jitters' squares;
* **rate** (the line: what the bulk class carries between all its flows) — the steady
  bulk goodput, measured with the probe's congestion control (BBR where the kernel has it:
  it asks what the *link* carries); without one, the transfers' line below. It is TCP
  payload, so the configuration it is folded into gets the line that carries it
  (``÷`` :data:`~pddbench.netem.slowstart.PAYLOAD_SHARE`: the link model takes the
  headers' share off a configured line, and a fitted one has it off already);
* **flow rate** (one warm KV connection's most) — the least-squares line ``seconds =
  setup + bytes / rate`` through the transfers (at least two sizes), timed with the
  congestion control the reference servers' KV connections use (``[network]
  tcp_congestion``), or what the deployment's own connections carried in an emulated run
  (``pddbench twin fit-windows``, :mod:`pddbench.twin.window_fit`: they are warmed
  differently). Where it is below the line it caps each flow's share in the twin
  (:meth:`LinkModelFile.flow_caps`: ``n`` flows carry ``min(line, n × flow rate)``, a
  window-bound connection adding its own rate until the line is the bound). Measured here
  (CUBIC, ±3 ms jitter, 1/100, no loss and no retransmission during the transfers): a
  freshly warmed connection carries ~40 MB/s of a 125 MB/s line, BBR ~89 % — HyStart
  leaves slow start early on the jittery RTT, and CUBIC grows its window only while the
  window, not the application, limits the sender.

Rates and bytes are put back at scale 1 (``× scale``: the emulated link carried 1/scale of
the modelled bytes at 1/scale of the rate, in the same time). ``setup_ms`` beyond the
fitted delay is kept in the file as ``overhead_ms``: the twin's model has no per-transfer
overhead beyond the delay, so it is reported, not applied.

The file also carries the emulated deployment's host costs per hop
(:class:`~pddbench.twin.host.HostCosts`, fitted by ``pddbench twin fit-host`` from an
emulated run; none until then), which the twin adds where each hop happens.

No I/O but reading and writing the file; the measuring is
:mod:`pddbench.twin.calibrate_measure`'s (root, namespaces).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pddbench.errors import UserError
from pddbench.netem.probe import LinkProbe
from pddbench.netem.slowstart import PAYLOAD_SHARE
from pddbench.netem.topology_config import Direction, LinkConfig, NetworkConfig, ShapeOverride
from pddbench.twin.host import HostCosts

FORMAT = "pddbench-link-model"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransferSample(_Model):
    """One timed transfer on a warm connection: ``nbytes`` on the emulated (scaled) link,
    first byte sent to last byte received."""

    nbytes: int = Field(gt=0)
    seconds: float = Field(gt=0)


class DirectionFit(_Model):
    """One WAN direction's fitted parameters (configured units, scale 1) and their basis."""

    link: str
    direction: Direction
    delay_ms: float = Field(ge=0)
    jitter_ms: float = Field(ge=0)
    rate_mbit: float = Field(gt=0)  # the line's (every bulk flow together)
    rate_source: Literal["transfers", "goodput"]
    # one warm KV connection's (the transfers' line; a cap on each flow where below the line)
    flow_rate_mbit: float | None = Field(default=None, gt=0)
    # "transfers": the calibration's timed transfers; else the emulated run it was fitted
    # from (pddbench twin fit-windows: the deployment's own connections), with its samples
    flow_rate_source: str = "transfers"
    flow_samples: int | None = None
    setup_ms: float | None = None  # the transfer line's intercept
    overhead_ms: float | None = None  # setup beyond the fitted delay (not applied)
    goodput_mbit: float | None = None  # the steady bulk goodput (scale 1)
    configured_rate_mbit: float | None = None
    configured_delay_ms: float = 0.0
    configured_jitter_ms: float = 0.0
    transfers: list[TransferSample] = Field(default_factory=list)


class Measured(_Model):
    """Where and when the measurements were taken."""

    at: str  # ISO 8601, UTC
    host: str
    kernel: str
    scenario: str
    scale: float = Field(gt=0)  # the emulated network's scale during the measurements
    congestion: str = ""  # TCP congestion control of the timed KV transfers (the servers')
    probe_congestion: str = ""  # of the goodput probe ("" in files that predate the split)
    kv_bytes_per_token: int | None = None
    transfer_sizes_tokens: list[int] = Field(default_factory=list)


class LinkModelFile(_Model):
    """``pddbench twin calibrate``'s output; ``--backend virtual --link-model FILE`` input."""

    format: Literal["pddbench-link-model"] = FORMAT
    format_version: int = 1
    measured: Measured
    probes: list[LinkProbe] = Field(default_factory=list)  # as measured (scaled units)
    directions: list[DirectionFit]
    # the emulated deployment's host costs per hop (pddbench twin fit-host; none: unfitted)
    host: HostCosts = HostCosts()

    def fit_for(self, link: str, direction: Direction) -> DirectionFit | None:
        for d in self.directions:
            if (d.link, d.direction) == (link, direction):
                return d
        return None

    def flow_caps(self) -> dict[tuple[str, Direction], float]:
        """One warm KV connection's most per WAN direction, bytes/s at scale 1, where it is
        below the line (the twin's :class:`~pddbench.twin.links.Direction` caps each
        flow's share at it)."""
        return {
            (d.link, d.direction): d.flow_rate_mbit * 1e6 / 8
            for d in self.directions
            if d.flow_rate_mbit is not None and d.flow_rate_mbit < d.rate_mbit
        }

    def network(self, net: NetworkConfig) -> NetworkConfig:
        """``net`` with every fitted direction's rate (as the line carrying the fitted
        payload rate), delay and jitter in place of the configured ones (the schedule, loss
        and everything else as configured)."""
        links = []
        for link in net.links:
            update: dict[str, ShapeOverride] = {}
            for d in ("a_to_b", "b_to_a"):
                fit = self.fit_for(link.link_name, d)
                if fit is None:
                    continue
                base = link.a_to_b if d == "a_to_b" else link.b_to_a
                fields = base.model_dump(exclude_none=True) if base is not None else {}
                fields |= {
                    "rate_mbit": fit.rate_mbit / PAYLOAD_SHARE,  # the line of that payload
                    "delay_ms": fit.delay_ms,
                    "jitter_ms": fit.jitter_ms,
                }
                update[d] = ShapeOverride(**fields)
            links.append(link.model_copy(update=update))
        unknown = {d.link for d in self.directions} - {lk.link_name for lk in net.links}
        if unknown and net.links:  # a scenario without a WAN takes only the host costs
            raise UserError(f"link model names links the scenario lacks: {sorted(unknown)}")
        return net.model_copy(update={"links": links})

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n")
        tmp.replace(path)


@dataclass(frozen=True)
class LinkModelSource:
    """A loaded link-model file and where it came from (``--link-model FILE``)."""

    path: Path
    model: LinkModelFile

    def recorded(self) -> dict[str, object]:
        """What a run's manifest records of it (under ``replay.link_model.calibration``)."""
        fits = [d.model_dump(exclude={"transfers"}) for d in self.model.directions]
        return {
            "file": str(self.path),
            "measured": self.model.measured.model_dump(),
            "fits": fits,
            "host": self.model.host.model_dump(),
        }


def load_link_model(path: Path) -> LinkModelSource:
    """The file, validated; a one-line UserError when it is not one."""
    try:
        return LinkModelSource(path, LinkModelFile.model_validate_json(path.read_text()))
    except OSError as exc:
        raise UserError(f"--link-model {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"--link-model {path}: not a pddbench link model ({first})") from exc


def _split(total: float, a: float, b: float) -> tuple[float, float]:
    """``total`` in the ratio a : b (halves when both are 0)."""
    if a + b <= 0:
        return total / 2, total / 2
    return total * a / (a + b), total * b / (a + b)


def fit_line(samples: Sequence[TransferSample]) -> tuple[float, float] | None:
    """(setup seconds, bytes per second) of the least-squares line through ``samples``;
    None without two sizes or when the slope is not positive."""
    xs = [float(s.nbytes) for s in samples]
    ys = [s.seconds for s in samples]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if slope <= 0:
        return None
    return my - slope * mx, 1.0 / slope


def fit_link(
    link: LinkConfig,
    probe: LinkProbe,
    transfers: dict[Direction, list[TransferSample]],
    scale: float,
) -> list[DirectionFit]:
    """Both directions of ``link`` fitted to its probe and timed transfers (see the module)."""
    shapes = {d: link.shape(d) for d in ("a_to_b", "b_to_a")}
    ab, ba = shapes["a_to_b"], shapes["b_to_a"]
    rtt_ms = probe.rtt_p50_ms
    delays = dict(zip(("a_to_b", "b_to_a"), _split(rtt_ms, ab.delay_ms, ba.delay_ms), strict=True))
    std = probe.rtt_std_ms if math.isfinite(probe.rtt_std_ms) else 0.0
    squares = _split(3 * std**2, ab.jitter_ms**2, ba.jitter_ms**2)
    jitters = dict(zip(("a_to_b", "b_to_a"), (math.sqrt(v) for v in squares), strict=True))
    goodputs = {"a_to_b": probe.goodput_a_to_b_mbit, "b_to_a": probe.goodput_b_to_a_mbit}
    out = []
    for d, shape in shapes.items():
        samples = transfers.get(d, [])
        line = fit_line(samples)
        good = goodputs[d]
        good_1 = None if good is None else good * scale
        setup_ms = overhead_ms = flow = None
        if line is not None:
            setup, rate_bps = line
            flow = rate_bps * scale * 8 / 1e6
            setup_ms = setup * 1000
            overhead_ms = setup_ms - delays[d]
        source: Literal["transfers", "goodput"]
        if good_1 is not None and good_1 > 0:
            rate, source = good_1, "goodput"
        elif flow is not None:
            rate, source, flow = flow, "transfers", None
        else:
            raise UserError(f"{link.link_name} {d}: neither transfers nor a goodput to fit")
        out.append(
            DirectionFit(
                link=link.link_name,
                direction=d,
                delay_ms=delays[d],
                jitter_ms=jitters[d],
                rate_mbit=rate,
                rate_source=source,
                flow_rate_mbit=flow,
                setup_ms=setup_ms,
                overhead_ms=overhead_ms,
                goodput_mbit=good_1,
                configured_rate_mbit=shape.rate_mbit,
                configured_delay_ms=shape.delay_ms,
                configured_jitter_ms=shape.jitter_ms,
                transfers=list(samples),
            )
        )
    return out


DEFAULT_SIZES_TOKENS = (1024, 8192, 32768)  # without a trace: short, typical, long prompts
SIZE_QUANTILES = (0.1, 0.5, 0.9)


def transfer_sizes_tokens(input_lengths: Sequence[int]) -> list[int]:
    """The KV transfer sizes to time, in prompt tokens: the trace's input lengths at
    :data:`SIZE_QUANTILES` (a P → decode transfer carries the uncached part of a prompt,
    at most all of it), distinct, ascending; the defaults without a trace."""
    if not input_lengths:
        return list(DEFAULT_SIZES_TOKENS)
    ordered = sorted(int(n) for n in input_lengths)
    picks = {ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in SIZE_QUANTILES}
    return sorted(max(1, p) for p in picks)
