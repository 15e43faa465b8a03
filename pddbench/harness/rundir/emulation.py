"""Whether a run's WAN was emulated: one record, written to the manifest and read by reports.

``EmulationStatus`` is the only model of that fact: ``pddbench replay`` writes it into
every run's manifest (``RunManifest.emulation``), the report reads it back from there
and shows :meth:`banner` on its first screen, in the headline table's title and in the
JSON. A scenario without a ``[network]`` (one site, no
WAN) is ``applicable = False``: nothing to emulate, nothing to flag.
Must not decide *whether* to emulate (the jobs do) or render anything.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EmulationStatus(BaseModel):
    """How a run's inter-datacenter network was provided."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    applicable: bool  # the scenario has a [network] (links between sites)
    emulated: bool
    reason: str = ""  # why not, when applicable and not emulated

    @property
    def missing(self) -> bool:
        """The scenario has WAN links but they were not emulated."""
        return self.applicable and not self.emulated

    def banner(self) -> str:
        return (
            "WAN NOT EMULATED: the servers ran on loopback"
            + (f" ({self.reason})" if self.reason else "")
            + "; transfer times include none of the scenario's links, so these numbers say"
            " nothing about cross-datacenter serving"
        )
