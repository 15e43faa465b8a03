"""The twin as a run's backend: a replay plan in, a finalised run folder out.

Owns :func:`drive_virtual`, the virtual-time counterpart of
:func:`pddbench.harness.drive.replay.run_replay`, and :class:`VirtualBackend`, the
harness's :class:`~pddbench.harness.drive.backends.ModelBackend` behind ``--backend
virtual`` (a reference-server scenario at full scale, no deployment): the plan's
requests get the servers' block hashes (:func:`~pddbench.twin.prompts.table_hashes`;
a steady-state point's primed prefixes :func:`~pddbench.twin.prompts.prime_hashes`, placed
before the clock starts), replay through
:func:`~pddbench.twin.run.run_twin`, and land in the run folder's journal and
``requests.parquet`` exactly as an emulated run's do; the manifest's ``replay`` section
says ``backend = "virtual"`` and carries the link model's parameters (with ``--link-model``:
the calibrated ones, and the file's measurement record); ``server_metrics.parquet``
and ``links.parquet`` come from :class:`~pddbench.twin.outputs.TwinOutputs` (the manifest's
clock is ``virtual``: its times are virtual seconds from the run's start). ``max_duration_s``
stops sending as the asyncio client's cap does. Not honoured yet: ``max_concurrency``.
Must not deploy anything, open sockets or choose the run folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.drive.backends import Drive
from pddbench.harness.drive.quiesce import Quiet
from pddbench.harness.drive.replay import ReplayOutcome, ReplayPlan, replay_section
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunClock, RunManifest, RunStatus
from pddbench.harness.rundir.records import Journal, RequestRecord, finalize_journal
from pddbench.netem.slowstart import PAYLOAD_SHARE
from pddbench.netem.topology_config import NetworkConfig
from pddbench.servers.config import DeploymentConfig
from pddbench.twin.calibrate import LinkModelFile, LinkModelSource
from pddbench.twin.host import NONE, HostCosts
from pddbench.twin.links import FlowCaps
from pddbench.twin.outputs import TwinOutputs, scrape_interval
from pddbench.twin.prompts import prime_hashes, table_hashes
from pddbench.twin.run import Twin, run_twin

TARGET = "virtual://"
VIRTUAL_CLOCK = RunClock(kind="virtual", origin_monotonic_s=0.0)  # servers' times = run times
SETTLED = "virtual time: the twin runs every request's work to its end, nothing is left busy"


def link_parameters(
    dep: DeploymentConfig, net: NetworkConfig | None, calibration: LinkModelSource | None = None
) -> dict[str, object]:
    """The link model's parameters per instance pair that carries traffic (the line, and
    the TCP payload rate its bulk transfers get), the schedule's size and, with
    ``--link-model``, the calibration they came from (for the manifest)."""
    twin = Twin(dep, net)
    out: dict[str, object] = {}
    for a in dep.instances:
        for b in dep.instances:
            if a.id != b.id:
                p = twin.net.params(a, b)
                out[f"{a.id}->{b.id}"] = {**asdict(p), "bulk_rate_bytes_per_s": p.bulk_rate}
    changes = sum(len(states) - 1 for states in twin.net.timelines.values())
    return {
        "model": "pddbench.twin.links",
        "prewarmed": True,
        "payload_share": PAYLOAD_SHARE,
        "paths": out,
        "schedule_changes": changes,
        "calibration": None if calibration is None else calibration.recorded(),
    }


def twin_config(
    scenario: Scenario, link_model: LinkModelFile | None = None
) -> tuple[DeploymentConfig, NetworkConfig | None]:
    """What the twin of ``scenario`` runs: its deployment, and its links at full scale (the
    twin moves modelled bytes) with ``link_model``'s fitted ones in place of the configured."""
    full = scenario.model_copy(update={"emulation_scale": 1.0})
    net = full.network_config() if full.network is not None else None
    if net is not None and link_model is not None:
        net = link_model.network(net)
    return full.deployment_config, net


def replay_records(
    plan: ReplayPlan,
    options: ReplayOptions,
    dep: DeploymentConfig,
    net: NetworkConfig | None,
    *,
    seed: int = 0,
    host: HostCosts = NONE,
    flow_caps: FlowCaps | None = None,
    observe: Callable[[Twin], None] | None = None,
) -> list[RequestRecord]:
    """``plan`` through the twin of ``dep`` under ``options`` (the client's error policy,
    duration cap and request limit): every sent request's record, in completion order."""
    primes = None
    if plan.priming is not None:
        prefix = prime_hashes(plan.table, dep.block_size)
        primes = [prefix(e) for e in plan.priming.entries]
    return run_twin(
        dep,
        net,
        plan.requests,
        table_hashes(plan.table, dep.block_size),
        primes=primes,
        seed=seed,
        on_error=options.on_error,
        cached_theoretical=plan.theoretical_cached,
        send_until_s=options.max_duration_s,
        request_limit_s=options.api.request_timeout_s,
        host=host,
        flow_caps=flow_caps,
        observe=observe,
    )


def drive_virtual(
    plan: ReplayPlan,
    options: ReplayOptions,
    dep: DeploymentConfig,
    net: NetworkConfig | None,
    paths: RunPaths,
    manifest: RunManifest,
    *,
    seed: int = 0,
    calibration: LinkModelSource | None = None,
) -> ReplayOutcome:
    """Replay ``plan`` through the twin of ``dep`` into ``paths``; finalises the folder.
    ``calibration``: the link-model file ``net`` was fitted with (recorded)."""
    links = link_parameters(dep, net, calibration)
    manifest.replay = replay_section(plan, options, TARGET + dep.router.id).model_copy(
        update={"backend": "virtual", "link_model": links}
    )
    manifest.clock = VIRTUAL_CLOCK
    if plan.priming is not None and manifest.ladder_point is not None:
        manifest.ladder_point.primed = (
            f"in process (the twin): {plan.priming.blocks} trace blocks of history, "
            f"{len(plan.priming.entries)} prefixes"
        )
    outputs = TwinOutputs(scrape_interval(plan.requests))
    host = calibration.model.host if calibration is not None else NONE
    caps = calibration.model.flow_caps() if calibration is not None else None
    records = replay_records(
        plan, options, dep, net, seed=seed, host=host, flow_caps=caps, observe=outputs.attach
    )
    with Journal(paths.journal) as journal:
        for rec in records:
            journal.append(rec)
    count, unreadable = finalize_journal(paths.journal, paths.requests)
    outputs.write(paths, manifest, max((r.end_s or 0.0 for r in records), default=0.0))
    manifest.planned_requests, manifest.sent_requests = len(plan.requests), len(records)
    manifest.finish(RunStatus.COMPLETE, records=count, unreadable_lines=unreadable)
    manifest.save(paths.root)
    errors = sum(1 for r in records if r.status != "ok")
    return ReplayOutcome(paths, count, False, errors)


class VirtualBackend:
    """``--backend virtual``: the scenario's reference deployment replayed in virtual time."""

    def __init__(self, seed: int = 0, link_model: LinkModelSource | None = None) -> None:
        self.seed = seed
        self.link_model = link_model

    def drive_model(self, scenario: Scenario, run: Drive) -> ReplayOutcome:
        """The twin of ``scenario`` (its links at full scale, fitted ones in place of the
        configured ones with ``--link-model``) drives ``run`` into its folder."""
        dep, net = twin_config(scenario, self.link_model.model if self.link_model else None)
        return drive_virtual(
            run.plan,
            run.options,
            dep,
            net,
            run.paths,
            run.manifest,
            seed=self.seed,
            calibration=self.link_model,
        )

    def settle(self) -> Quiet:
        """At once: a point's work is done when the twin returns (nothing to watch)."""
        return Quiet(True, False, 0.0, note=SETTLED)
