"""The emulation scale: by how much link rates and KV byte counts are divided, chosen so
this machine carries every WAN link inside the probe tolerance. Pure.

TCP's dynamics depend on the bandwidth-delay product in *packets*: the smaller the scale,
the closer slow start, window growth and loss recovery are to the real link's. So the
scale is the *smallest* step of :data:`SCALE_STEPS` at which the fastest WAN link, scaled,
fits the rate the chosen shaping backend sustains (:data:`SUSTAINED_MBIT`).

Sustained rates (one TCP flow, 2 × 15 ms, ±3 ms jitter, goodput ≥ 90 % of the shaped rate),
measured on a 2-vCPU VM (kernel 6.18; ``pddbench netem probe`` on a bare [network] file,
2026-12-01): the userspace NFQUEUE stage held 500 Mbit/s at 95 %, 1 Gbit/s at 92-93 %,
2 Gbit/s at 96 %, 5 Gbit/s at 74-82 %, 10 Gbit/s at 72-75 %. We take 1 Gbit/s, half the
idle figure, because during a replay the servers and the client share those CPUs. HTB +
netem in the kernel: 5 Gbit/s at 95-96 % (shared/NETWORK.md), taken as is.
Intra-site segments (the RDMA stand-in, 400 Gbit/s in the built-ins) are plain veth +
HTB, which carries ~20 Gbit/s for one flow here (NETWORK.md: 20-26 Gbit/s), so they
count too, against :data:`VETH_MBIT`: otherwise a P→RLD transfer would run at veth
speed, not the segment's. The built-ins (100 Gbit/s WAN, 400 Gbit/s segments) come out
at 1/100 on the userspace backend and 1/20 on kernel netem; the systems compared in one
replay share one network, so one scale.
"""

from __future__ import annotations

from dataclasses import dataclass

SUSTAINED_MBIT = {"nfqueue": 1000.0, "kernel": 5000.0}
VETH_MBIT = 20_000.0
SCALE_STEPS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)


@dataclass(frozen=True)
class ScaleChoice:
    scale: float
    reason: str


def choose_scale(
    wan_rates_mbit: list[float], segment_rates_mbit: list[float], backend: str
) -> ScaleChoice:
    """The smallest step at which the fastest WAN link fits ``backend``'s sustained rate and
    the fastest intra-site segment fits veth's."""
    sustained = SUSTAINED_MBIT[backend]
    wan = max(wan_rates_mbit, default=0.0)
    seg = max(segment_rates_mbit, default=0.0)
    scale = next(
        (s for s in SCALE_STEPS if wan / s <= sustained and seg / s <= VETH_MBIT),
        SCALE_STEPS[-1],
    )
    reason = (
        f"auto: 1/{scale:g} — fastest WAN link {wan:g} Mbit/s ({backend} backend sustains"
        f" {sustained:g} Mbit/s here), fastest intra-site segment {seg:g} Mbit/s (veth"
        f" ~{VETH_MBIT:g} Mbit/s)"
    )
    return ScaleChoice(scale, reason)
