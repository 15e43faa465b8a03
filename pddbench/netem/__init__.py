"""WAN emulation: namespaces, links, shaping (netem or a userspace delay line), probes, cleanup.

Public API (imported lazily so the delay daemon starts fast)::

    from pddbench.netem import NetworkConfig, Topology
    with Topology.up(config, run_id="ab12") as topo:
        proc = topo.spawn("prefill-0", argv, env, log_path)
        topo.address("decode-0"); topo.apply_change("dc-a-dc-b", {"delay_ms": 40})
        probes = topo.probe()

It must not know about LLMs: instances are names with a namespace and an address.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "NetworkConfig": "pddbench.netem.topology_config",
    "LinkConfig": "pddbench.netem.topology_config",
    "SiteConfig": "pddbench.netem.topology_config",
    "ClientConfig": "pddbench.netem.topology_config",
    "SegmentConfig": "pddbench.netem.topology_config",
    "Shape": "pddbench.netem.topology_config",
    "Topology": "pddbench.netem.topology",
    "HostInfo": "pddbench.netem.topology",
    "guard_client_namespace": "pddbench.netem.topology",
    "LinkChange": "pddbench.netem.schedule",
    "Schedule": "pddbench.netem.schedule",
    "ScheduledChange": "pddbench.netem.schedule",
    "ChangeRecord": "pddbench.netem.schedule",
    "LinkProbe": "pddbench.netem.probe",
    "ProbeTolerance": "pddbench.netem.probe",
    "check_probe": "pddbench.netem.probe",
    "write_link_probes": "pddbench.netem.probe",
    "cleanup": "pddbench.netem.cleanup",
    "set_congestion": "pddbench.netem.tcp",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'pddbench.netem' has no attribute {name!r}")
