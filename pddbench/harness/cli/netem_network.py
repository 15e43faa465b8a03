"""The network a ``pddbench netem`` command emulates: from a scenario name or a TOML file.

A built-in scenario name, or a file with ``[deployment]`` / ``[[engines]]``, is loaded and
validated by the harness's scenario loader — the one ``pddbench replay`` uses — and its
network is :meth:`Scenario.network_config` (sites from the instances' datacenters, the
scenario's ``emulation_scale``), so ``netem probe --scenario pdd`` measures exactly the
links a replay of ``pdd`` gets. A file with only a ``[network]`` table (with ``sites``) is
a bare topology. This module owns only that choice and one-line errors.
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


def load_network_config(name_or_path: str | Path, *, probe_scale: bool = False) -> NetworkConfig:
    """The network of a built-in scenario or scenario file, or of a bare ``[network]`` file.

    ``probe_scale``: a scenario's automatic scale is checked on this host first, as a replay
    checks it (:mod:`pddbench.harness.deploy.scale_probe`), so that ``netem up|probe
    --scenario`` emulate what a replay of that scenario would."""
    from pddbench.harness.config.scenario import parse_scenario, scenario_text

    text, origin = scenario_text(str(name_or_path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: not valid TOML: {exc}") from None
    if "network" not in data or not isinstance(data["network"], dict):
        raise UserError(f"{origin}: no [network] table")
    if "deployment" in data or "engines" in data:
        from pddbench.netem.backend import backend_here

        parsed = parse_scenario(text, origin)
        if probe_scale:
            import functools

            import click

            from pddbench.harness.deploy.scale_probe import probed

            echo = functools.partial(click.echo, err=True)
            return probed(parsed, backend_here(), echo=echo).network_config()
        return parsed.resolved(backend_here()).network_config()
    return network_from_mapping(data["network"], origin)
