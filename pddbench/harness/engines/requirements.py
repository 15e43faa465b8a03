"""What a scenario needs from the machine (``requires = ["gpu"]``) and the one-line refusal.

Owns deciding, before anything is deployed, whether a scenario can run here; the GPU
templates in ``pddbench/scenarios`` are documented-only on machines without one. No I/O
beyond looking for the NVIDIA device nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pddbench.errors import UserError

KNOWN = ("gpu",)


def has_nvidia_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def unmet(requires: Sequence[str]) -> list[str]:
    """The requirements this machine does not meet."""
    return [r for r in requires if r == "gpu" and not has_nvidia_gpu()]


def check_runnable(name: str, requires: Sequence[str]) -> None:
    """Raise a one-line :class:`UserError` when scenario ``name`` cannot run here."""
    missing = unmet(requires)
    if missing:
        raise UserError(
            f"scenario {name} requires {', '.join(missing)} and this machine has none: "
            "it is a documented template, not runnable here"
        )
