"""The delay line of one link direction: when each packet is due, which ones are lost.

Sans-IO: it is fed packet ids with arrival times (ns, monotonic) and answers which ids
are due; the NFQUEUE daemon (``delayd``) does the socket work, tests drive it with a fake
clock. Packets leave in arrival order: due = max(previous due, arrival + delay + jitter),
so jitter never reorders (as netem does when given a rate). ``lead_us`` releases every
packet that much early, to offset the stage's own latency (waking up on a queued packet,
the verdict round trip), which would otherwise add to every delay. Jitter is uniform on
[-jitter, +jitter] or normal with standard deviation ``jitter`` (netem's convention); a
packet's own delay is clipped at zero. Loss drops each packet (a GSO super-packet is one
packet here) independently with probability ``loss_pct / 100``; ``down`` drops all.

``one_way_delay_samples`` draws from the same model with numpy, for expected quantiles.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from pddbench.netem.topology_config import Shape

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DelaySettings:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    jitter_dist: Literal["uniform", "normal"] = "uniform"
    loss_pct: float = 0.0
    down: bool = False

    @classmethod
    def from_shape(cls, shape: Shape, *, down: bool = False) -> DelaySettings:
        return cls(
            delay_ms=shape.delay_ms,
            jitter_ms=shape.jitter_ms,
            jitter_dist=shape.jitter_dist,
            loss_pct=shape.loss_pct,
            down=down,
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class DelayStats:
    received: int = 0
    dropped: int = 0
    released: int = 0
    max_held: int = 0


class DelayLine:
    """FIFO of (due time, packet id); ids must arrive in increasing order."""

    def __init__(
        self, settings: DelaySettings, rng: random.Random | None = None, lead_us: float = 0.0
    ) -> None:
        self._rng = rng or random.Random()
        self._lead_ns = int(lead_us * 1000)
        self._held: deque[tuple[int, int]] = deque()
        self._last_due = 0
        self.stats = DelayStats()
        self.lateness_ns: deque[int] = deque(maxlen=4096)  # release time - due, per batch
        self.settings = settings
        self.update(settings)

    def set_lead(self, lead_us: float) -> None:
        """Release packets arriving from now on ``lead_us`` early (the stage's own latency)."""
        self._lead_ns = int(max(0.0, lead_us) * 1000)

    @property
    def lead_us(self) -> float:
        return self._lead_ns / 1000

    def update(self, settings: DelaySettings) -> None:
        """New settings apply to packets arriving from now on; held packets keep their time."""
        self.settings = settings
        self._delay_ns = int(settings.delay_ms * 1e6)
        self._jitter_ns = settings.jitter_ms * 1e6
        self._normal = settings.jitter_dist == "normal"
        self._loss = settings.loss_pct / 100.0

    def admit(self, packet_id: int, now_ns: int) -> bool:
        """Take a newly queued packet; False means drop it now."""
        stats = self.stats
        stats.received += 1
        if self.settings.down or (self._loss > 0 and self._rng.random() < self._loss):
            stats.dropped += 1
            return False
        delay = self._delay_ns
        if self._jitter_ns > 0:
            if self._normal:
                offset = self._rng.gauss(0.0, self._jitter_ns)
            else:
                offset = self._rng.uniform(-self._jitter_ns, self._jitter_ns)
            delay = max(0, int(delay + offset))
        due = max(self._last_due, now_ns + max(0, delay - self._lead_ns))
        self._last_due = due
        self._held.append((due, packet_id))
        if len(self._held) > stats.max_held:
            stats.max_held = len(self._held)
        return True

    def next_due_ns(self) -> int | None:
        return self._held[0][0] if self._held else None

    def pop_due(self, now_ns: int) -> int:
        """Remove every packet due by ``now_ns``; return the highest such id, or -1."""
        held = self._held
        last = -1
        first_due = -1
        while held and held[0][0] <= now_ns:
            due, last = held.popleft()
            if first_due < 0:
                first_due = due
            self.stats.released += 1
        if first_due >= 0:
            self.lateness_ns.append(now_ns - first_due)
        return last

    def __len__(self) -> int:
        return len(self._held)


def one_way_delay_samples(settings: DelaySettings, n: int, seed: int = 0) -> np.ndarray:
    """``n`` one-way delays (ms) of sparse packets under ``settings`` (no queueing)."""
    import numpy as np  # not at module level: the delay daemon must start fast

    rng = np.random.default_rng(seed)
    base = np.full(n, settings.delay_ms)
    if settings.jitter_ms > 0:
        if settings.jitter_dist == "normal":
            base = base + rng.normal(0.0, settings.jitter_ms, n)
        else:
            base = base + rng.uniform(-settings.jitter_ms, settings.jitter_ms, n)
    return np.maximum(base, 0.0)


def rtt_quantiles_ms(
    forward: DelaySettings, backward: DelaySettings, quantiles: tuple[float, ...], n: int = 200_000
) -> dict[float, float]:
    """Expected RTT quantiles of sparse ping-pongs over a link (model only, no stack cost)."""
    import numpy as np

    rtt = one_way_delay_samples(forward, n, seed=1) + one_way_delay_samples(backward, n, seed=2)
    return {q: float(np.quantile(rtt, q)) for q in quantiles}


MAX_LEAD_US = 2000.0


def stage_lead_us(
    near_ms: Sequence[float], far_ms: Sequence[float], configured_ms: float, passes: int
) -> float:
    """The lead per pass that offsets a userspace delay stage's own latency (µs).

    ``near_ms`` are RTTs that cross no stage, ``far_ms`` RTTs (sampled alternately with
    them) that cross ``passes`` stages whose delays sum to ``configured_ms``. The lead is
    the fastest pass's cost, from the minima: a packet is released early only by however
    much its own pass beats the fastest calibration pass, so a burst of load during the
    far samples (which a quantile would take for stage cost) cannot make every later
    packet early. 0 without samples; at most ``MAX_LEAD_US``.
    """
    if not near_ms or not far_ms or passes < 1:
        return 0.0
    excess_ms = min(far_ms) - min(near_ms) - configured_ms
    return min(MAX_LEAD_US, max(0.0, excess_ms * 1000 / passes))
