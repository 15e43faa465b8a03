"""Read the ``[network]`` table of a scenario TOML file into a :class:`NetworkConfig`.

A stop-gap until the harness's scenario loader hands over the same model: it owns only
the file reading and turning validation errors into one clear ``UserError``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pddbench.errors import UserError
from pddbench.netem.topology_config import NetworkConfig


def network_from_mapping(data: dict[str, Any], source: str = "scenario") -> NetworkConfig:
    try:
        return NetworkConfig.model_validate(data)
    except ValidationError as exc:
        details = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "network"
            details.append(f"{source}: [network] {where}: {err['msg']}")
        first = details[0] if details else f"{source}: invalid [network] table"
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        raise UserError(first + more, details=details) from None


def load_network_config(path: str | Path) -> NetworkConfig:
    """The ``[network]`` table of the TOML file at ``path``, validated."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"scenario file not found: {p}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{p}: not valid TOML: {exc}") from None
    if "network" not in data or not isinstance(data["network"], dict):
        raise UserError(f"{p}: no [network] table")
    return network_from_mapping(data["network"], str(p))
