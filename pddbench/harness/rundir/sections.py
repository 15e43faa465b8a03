"""The manifest's sections: one model per part of ``manifest.json`` that a writer fills.

Owns :class:`HostInfo`, :class:`RunCounts`, :class:`ScenarioSection`, :class:`TraceInfo`,
:class:`ReplaySection` (the replay's target and its :class:`ReplayOptions`, what
``--resume`` reads back), :class:`DeploymentInfo` (what ``deploy`` brought up) and
:class:`LocustResult` (the Locust master's ``result.json``, the same model it writes). On
disk every section reads as it always has: keys a section does not declare are kept
verbatim (``extra="allow"``: older and synthetic runs), and only the keys a writer set are
written. Must not decide anything about a run nor read anything but the manifest's JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from pddbench.harness.config.cost import CostModel
from pddbench.harness.config.replay import ReplayOptions


class Section(BaseModel):
    """A manifest section: keys it does not declare are kept as they were written."""

    model_config = ConfigDict(extra="allow")


class HostInfo(Section):
    """The machine that ran the client."""

    hostname: str | None = None
    platform: str | None = None
    kernel: str | None = None
    cpus: int | None = None
    python: str | None = None

    @property
    def name(self) -> str:
        """The host's name ("" when unknown; older runs wrote ``name``)."""
        return self.hostname or str((self.model_extra or {}).get("name") or "")


class ScenarioSection(Section):
    """The scenario a run was made with, as :meth:`Scenario.manifest` recorded it, or an
    external ``--target`` (``deployment = "external"``).

    The config tree (``deployment``, ``network``, ``engines``, …) is kept as recorded and
    read back through :class:`~pddbench.harness.config.scenario.Scenario` by whoever needs
    it (``--resume``): validating an old run's tree by today's rules at every load would
    refuse runs whose scenario no longer validates and re-derive their recorded cost."""

    name: str | None = None
    target: str | None = None  # an external target's URL
    sla: dict[str, float | str | None] | None = None  # the [sla] as written ({}: none)
    cost: CostModel | None = None  # the cost derived from the deployment ({}: no [cost])

    @field_validator("cost", mode="before")
    @classmethod
    def _no_cost(cls, v: object) -> object:
        return None if v == {} else v

    @field_serializer("cost")
    def _cost(self, v: CostModel | None) -> dict[str, Any]:
        return {} if v is None else v.model_dump(mode="json")

    @property
    def external(self) -> bool:
        """An endpoint the harness did not deploy (``replay --target``)."""
        return (self.model_extra or {}).get("deployment") == "external"


class TraceInfo(Section):
    """The trace file a run replayed and what of it was replayed."""

    path: str | None = None
    digest: str | None = None  # rundir.folder.file_digest of the file
    requests: int | None = None
    epoch: str | None = None
    source: dict[str, Any] | None = None  # the trace file's own provenance metadata
    replayed: str | None = None  # the plan's selection note
    replayed_requests: int | None = None
    repeat: int | None = None  # nightly: which repeat of the point


_OPTION_KEYS = tuple(ReplayOptions.__dataclass_fields__)


class ReplaySection(Section):
    """How the run was replayed: the target, the options and the plan, and the backend.

    On disk the options' keys stand beside ``target`` and ``plan`` (the section's form since
    the options were first recorded); a section without them (an older run) has none."""

    target: str | None = None
    plan: str | None = None  # the plan's selection note
    engine: Literal["locust"] | None = None  # None: the asyncio engine
    workers: int | None = None  # Locust
    worker_mode: Literal["local", "remote"] | None = None  # Locust
    options: ReplayOptions | None = None
    backend: Literal["emulated", "virtual"] | None = None  # None: emulated (real servers)
    link_model: dict[str, Any] | None = None  # virtual: the twin's link parameters, verbatim

    @model_validator(mode="before")
    @classmethod
    def _gather_options(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "options" in data or "vocab_size" not in data:
            return data
        rest = {k: v for k, v in data.items() if k not in _OPTION_KEYS}
        try:
            options = ReplayOptions.from_json({k: data[k] for k in _OPTION_KEYS if k in data})
        except ValueError:  # options this version cannot read: kept verbatim
            return data
        return {**rest, "options": options}

    @model_serializer(mode="wrap")
    def _flat(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        options = data.pop("options", None)
        if self.options is not None and options is not None:
            data.update(self.options.to_json())
        return data


class DeploymentInfo(Section):
    """What a deployment brought up (``deploy`` fills it; the manifest records it)."""

    mode: Literal["emulated", "loopback"]
    front_door: str = ""
    instances: dict[str, str] = Field(default_factory=dict)  # name -> URL
    pids: dict[str, int] = Field(default_factory=dict)  # name -> PID the harness started
    # bytes each emulated WAN direction carried during the run, by class (bulk: the
    # DSCP-marked KV; control: the rest), IP packets as the egress qdisc saw them
    wan_bytes: dict[str, dict[str, int]] = Field(default_factory=dict)
    faults: list[dict[str, Any]] = Field(default_factory=list)  # [[faults]] as they happened
    topology: dict[str, Any] | None = None  # netem's Topology.report(), verbatim
    links: list[dict[str, Any]] = Field(default_factory=list)  # netem's link probes
    prewarmed: list[dict[str, Any]] = Field(default_factory=list)  # KV peer connections

    def recorded(self) -> DeploymentInfo:
        """A copy with every field set (the manifest writes all of them)."""
        return DeploymentInfo.model_validate(self.model_dump())


class RunCounts(BaseModel):
    """What a replay planned, sent and recorded: the manifest's counts, and the same in
    the Locust master's result (each backend records them alike)."""

    planned_requests: int | None = None
    sent_requests: int | None = None
    duration_cap_hit_at_s: float | None = None  # when --duration stopped new requests
    records: int | None = None


class LocustResult(Section, RunCounts):
    """The Locust master's ``result.json``: how the run went, per worker and overall."""

    status: str
    interrupted: str | None = None  # why the master stopped early (a signal)
    failure: str | None = None
    origin_monotonic_s: float | None = None
    origin_wall: str | None = None
    incomplete_reasons: list[str] = Field(default_factory=list)
    suspect_reasons: list[str] = Field(default_factory=list)
    workers: list[dict[str, Any]] = Field(default_factory=list)  # each worker's report
    master: dict[str, Any] = Field(default_factory=dict)  # bind, web UI, CPU verdict
    locust_version: str | None = None
