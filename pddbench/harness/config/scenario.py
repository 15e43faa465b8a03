"""Scenarios: one validated config tree describing a system under test and its conditions.

A scenario (TOML) names the deployment, the emulated network, the SLA and the cost model:

* ``[deployment]`` — a reference-server deployment (roles, hardware, policies; the
  ``pddbench.servers`` schema), started as ``python -m pddbench.servers.host`` processes
  through the same instance-command path as real engines; or
* ``[[engines]]`` — real engines: an argv template per instance (``{host}``, ``{port}``,
  ``{python}``, ``{name}``, ``{run_dir}``, ``{addr[NAME]}`` = another instance's
  host:port), env, health path, start-up timeout;
* ``requires`` — what the machine must have (``["gpu"]``): ``pddbench replay`` refuses
  the scenario in one line before deploying anything where it is unmet;
* ``[network]`` — the emulated links (``pddbench.netem`` schema) *without* site lists:
  sites are the instances' datacenters (``datacenter`` / ``site``); absent → loopback;
* ``emulation_scale`` — one factor by which link rates and KV byte counts are divided
  (delays stay real), so transfer times stay true while this machine moves fewer bytes;
  ``"auto"`` (the default): the smallest factor at which the shaping backend carries the
  fastest WAN link (``pddbench.netem.scale``), fixed by :meth:`Scenario.resolved` before
  a run and recorded in its manifest;
* ``[sla]``, ``[cost]``, ``[client]`` — targets, hardware prices and line costs, API
  options. The cost itself is derived from the instances (hardware × chips; engines name
  theirs with ``hardware`` and ``chips``): :attr:`Scenario.cost_model`.

Built-ins ship as package data (``pddbench/scenarios/*.toml``), shared with
``pddbench serve``. The whole tree, as loaded, is copied into every run's manifest.
Must not start anything.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from pddbench.errors import UserError
from pddbench.harness.config.cost import Chips, CostModel, CostSettings, derive_cost
from pddbench.harness.config.sla import SLA, sla_from_mapping
from pddbench.netem.topology_config import ClientConfig, NetworkConfig, SegmentConfig, SiteConfig
from pddbench.servers import profiles
from pddbench.servers.config import (
    DeploymentConfig,
    InstanceConfig,
    deployment_table,
    error_lines,
)

SCENARIO_PACKAGE = "pddbench.scenarios"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineInstance(_Strict):
    """A real engine (or any server) started from an argv template."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    site: str = "dc-a"
    command: list[str] = Field(min_length=1)
    port: int = Field(8000, ge=1, le=65535)
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout_s: float = Field(120.0, gt=0)
    role: str = "engine"
    hardware: str | None = None  # GPU type, for the cost (a [cost] needs it on every engine)
    chips: int = Field(1, ge=1)


class FaultSpec(_Strict):
    """``[[faults]]``: kill an instance (its process and every process it started, with
    SIGKILL, as a crash) ``at_s`` seconds after the run's first request is due."""

    at_s: float = Field(ge=0)
    kill: str


class ProbeToleranceSettings(_Strict):
    """How far measured links may be from their configuration before a run is refused.

    Looser than the emulator's accuracy bars on an idle machine (``bench/bench_netem.py``):
    the probe shares a 2-core machine with everything else a CI run does."""

    rtt_p50_ms: float = Field(5.0, gt=0)
    rtt_p99_ms: float = Field(30.0, gt=0)
    goodput_fraction: float = Field(0.7, ge=0, le=1)


class ClientSettings(_Strict):
    api: Literal["openai", "sglang"] = "openai"
    model: str | None = None
    path: str | None = None
    vocab_size: int = Field(32000, ge=16)
    first_token_id: int = Field(1000, ge=0)
    cache_block_size: int | None = Field(None, ge=1)
    site: str | None = None  # where the load generator sits (default: the front door's)

    @model_validator(mode="after")
    def _vocabulary(self) -> ClientSettings:
        # the materialiser needs at least two usable ids above the first one
        if self.vocab_size - self.first_token_id < 2:
            raise ValueError(
                f"client.vocab_size: {self.vocab_size} must exceed client.first_token_id "
                f"({self.first_token_id}) by at least 2 (prompts use ids in [first, vocab))"
            )
        return self


def _as_written(model: type[BaseModel], doc: str, drop: tuple[str, ...], **more: Any) -> Any:
    """A model of ``model``'s table as a scenario writes it: its fields, types and defaults
    (no second copy of them), less ``drop``, plus ``more``. What the whole must satisfy is
    checked by ``model`` itself when the harness builds it from the table."""
    fields = {n: (f.annotation, f) for n, f in model.model_fields.items() if n not in drop}
    name = "Scenario" + model.__name__.removesuffix("Config")
    return create_model(name, __base__=_Strict, __doc__=doc, **fields, **more)


# ``[network]``: netem's NetworkConfig less ``sites`` (the instances' datacenters give
# them), plus ``site_segments`` (a segment per site)
ScenarioNetwork = _as_written(
    NetworkConfig,
    "The ``[network]`` table of a scenario (sites derived from the instances).",
    ("sites",),
    site_segments=(dict[str, SegmentConfig], Field(default_factory=dict)),
)
# ``[deployment]``: the servers' DeploymentConfig less the name (the scenario's) and with
# addresses optional (loopback ports, or the emulated namespaces', are the harness's)
ScenarioInstance = _as_written(
    InstanceConfig,
    "One ``[[deployment.instances]]`` entry.",
    ("address", "listen"),
    address=(str | None, None),
    listen=(str | None, None),
)
ScenarioDeployment = _as_written(
    DeploymentConfig,
    "The ``[deployment]`` table of a scenario (reference servers).",
    ("name", "instances"),
    name=(str | None, None),
    instances=(list[ScenarioInstance], ...),
)


class Scenario(_Strict):
    """A validated scenario (see the module docstring)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    description: str = ""
    requires: list[Literal["gpu"]] = Field(default_factory=list)  # refused where unmet
    deployment: ScenarioDeployment | None = None  # type: ignore[valid-type]
    engines: list[EngineInstance] = Field(default_factory=list)
    front_door: str | None = None
    network: ScenarioNetwork | None = None  # type: ignore[valid-type]
    emulation_scale: float | Literal["auto"] = "auto"
    scale_source: str = ""  # how the scale was chosen (set by ``resolved``)
    startup_timeout_s: float = Field(60.0, gt=0)
    probe_tolerance: ProbeToleranceSettings = Field(
        default_factory=lambda: ProbeToleranceSettings()
    )
    sla: SLA | None = None  # absent: the report's default SLA
    cost: CostSettings | None = None  # absent (or an empty table): no BCR
    client: ClientSettings = ClientSettings()
    faults: list[FaultSpec] = Field(default_factory=list)

    @field_validator("cost", mode="before")
    @classmethod
    def _empty_cost(cls, v: object) -> object:
        if v == {}:
            return None
        if isinstance(v, dict) and "breakdown" in v:  # a manifest's derived CostModel
            return {k: v[k] for k in ("currency", "unit_price", "line_cost", "gpus") if k in v}
        return v

    @field_validator("emulation_scale", mode="before")
    @classmethod
    def _scale(cls, v: object) -> object:
        """One plain line for a bad scale (not the union's type names, one per member)."""
        if v == "auto":
            return v
        try:
            number = float(v) if not isinstance(v, bool) else math.nan  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = math.nan
        if not number > 0 or math.isinf(number):
            raise ValueError(f'got {v!r}; allowed: "auto" or a number > 0 (e.g. 8)')
        return number

    @field_validator("deployment")
    @classmethod
    def _valid_deployment(cls, v: BaseModel | None) -> BaseModel | None:
        """The reference deployment, validated by the servers' own schema at load."""
        if v is not None:
            _deployment_config(v.model_dump(exclude_unset=True), "scenario")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Scenario:
        if (self.deployment is None) == (not self.engines):
            raise ValueError("give either a [deployment] (reference servers) or [[engines]]")
        if self.deployment is not None:
            model = profiles.model(self.deployment_config.model)
            if self.client.vocab_size != model.vocab_size:
                raise ValueError(
                    f"client.vocab_size: {self.client.vocab_size} is not the vocabulary of "
                    f"the deployment's model {model.name} ({model.vocab_size}); the reference "
                    "servers emit tokens below it and every stream is checked against it"
                )
        names = [n for n, _ in self.instance_sites()]
        if len(set(names)) != len(names):
            raise ValueError("instance names must be unique")
        door = self.front_door_name
        if door not in names:
            raise ValueError(f"front_door {door!r} is not an instance")
        for fault in self.faults:
            if fault.kill not in names:
                raise ValueError(f"faults: kill {fault.kill!r} is not an instance")
        if self.network is not None:
            self._network(1.0)  # validates
        self.cost_model  # noqa: B018 - validates: prices for every GPU, counts that agree
        return self

    # -- derived -------------------------------------------------------------------
    @property
    def is_reference(self) -> bool:
        return self.deployment is not None

    def instance_sites(self) -> list[tuple[str, str]]:
        """(instance name, site) for every instance, in declaration order."""
        if self.deployment is not None:
            return [(i.id, i.datacenter) for i in self.deployment.instances]
        return [(e.name, e.site) for e in self.engines]

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Scenario:
        """A copy; one with another deployment or name builds its own :attr:`deployment_config`
        (a plain copy would carry this one's cached value: the old seed, the old instances)."""
        copy = super().model_copy(update=update, deep=deep)
        if update and {"deployment", "name"} & update.keys():
            copy.__dict__.pop("deployment_config", None)
        return copy

    def with_seed(self, seed: int) -> Scenario:
        """This scenario with its deployment's seed (the servers' draws: MTP acceptance,
        tokens) set to ``seed``."""
        if self.deployment is None:
            raise UserError(f"scenario {self.name} has no [deployment] to seed")
        dep = self.deployment.model_copy(update={"seed": seed})
        return self.model_copy(update={"deployment": dep})

    @functools.cached_property
    def deployment_config(self) -> DeploymentConfig:
        """The reference deployment as the servers read it (loopback addresses); built once."""
        if self.deployment is None:
            raise UserError(f"scenario {self.name} has no [deployment]")
        return _deployment_config(self.deployment.model_dump(exclude_unset=True), self.name)

    @property
    def front_door_name(self) -> str:
        if self.front_door:
            return self.front_door
        if self.deployment is not None:
            routers = [i.id for i in self.deployment.instances if i.role == "router"]
            return str(routers[0]) if routers else ""
        return self.engines[0].name

    def full_sla(self) -> SLA:
        """The SLA this scenario is judged by: its ``[sla]`` keys over the default SLA."""
        declared = self.sla.model_dump(exclude_unset=True) if self.sla else None
        return sla_from_mapping(declared, where=f"scenario {self.name}")

    @property
    def integrity_seed(self) -> int | None:
        """The reference servers' token seed (their output is checked token by token)."""
        if self.deployment is None:
            return None
        return int(self.deployment.seed)

    @property
    def cost_model(self) -> CostModel | None:
        """Σ instances × chips × unit price + line costs (``None`` without a ``[cost]``)."""
        if self.cost is None:
            return None
        return derive_cost(self.cost, self._chips())

    def _chips(self) -> list[Chips]:
        if self.deployment is not None:
            return [
                Chips(i.id, i.role.value, i.hardware, i.chips)
                for i in self.deployment_config.instances
                if i.role.value != "router"
            ]
        missing = [e.name for e in self.engines if e.hardware is None]
        if missing:
            raise ValueError(
                f"cost: engine(s) {', '.join(missing)} name no hardware; a [cost] needs "
                "hardware (and chips) on every engine"
            )
        return [Chips(e.name, e.role, str(e.hardware), e.chips) for e in self.engines]

    def network_config(self) -> NetworkConfig:
        """The emulated network with sites derived from the instances' datacenters (the
        scale must be resolved: see :meth:`resolved`)."""
        return self._network(1.0 / self.byte_scale)

    def _network(self, scale: float) -> NetworkConfig:
        if self.network is None:
            raise UserError(f"scenario {self.name} has no [network]")
        sites: dict[str, list[str]] = {}
        for name, site in self.instance_sites():
            sites.setdefault(site, []).append(name)
        data = self.network.model_dump(exclude_unset=True)
        data.pop("site_segments", None)
        segments = self.network.site_segments
        client_site = self.client.site or dict(self.instance_sites())[self.front_door_name]
        data["sites"] = [
            SiteConfig(name=s, instances=members, segment=segments.get(s))
            for s, members in sites.items()
        ]
        data.setdefault("clients", [ClientConfig(name="client", site=client_site)])
        data.setdefault("scale", scale)
        try:
            return NetworkConfig.model_validate(data)
        except ValidationError as exc:
            raise ValueError(error_lines(exc, "network")[0]) from None

    def resolved(self, backend: str = "nfqueue") -> Scenario:
        """This scenario with a numeric ``emulation_scale`` (``"auto"`` chosen for ``backend``,
        the shaping backend this machine gives its links) and ``scale_source`` saying how."""
        if self.emulation_scale != "auto":
            source = self.scale_source or "set in the scenario"
            return self.model_copy(update={"scale_source": source})
        if self.network is None:
            return self.model_copy(
                update={"emulation_scale": 1.0, "scale_source": "auto: no WAN links"}
            )
        scale, reason = self._network(1.0).auto_scale(backend)
        return self.model_copy(update={"emulation_scale": scale, "scale_source": reason})

    @property
    def byte_scale(self) -> float:
        """1 / emulation_scale (the scale must be resolved)."""
        if self.emulation_scale == "auto":
            raise ValueError(f"scenario {self.name}: emulation_scale not resolved")
        return 1.0 / float(self.emulation_scale)

    def manifest(self) -> dict[str, Any]:
        """The scenario as recorded in a run's manifest ([sla] as written, the cost as
        derived from the deployment: total and breakdown)."""
        data = self.model_dump(mode="json", exclude={"sla", "cost", "network", "deployment"})
        for key in ("deployment", "network"):  # as the scenario wrote them
            table = getattr(self, key)
            data[key] = table.model_dump(mode="json", exclude_unset=True) if table else None
        data["sla"] = self.sla.model_dump(mode="json", exclude_unset=True) if self.sla else {}
        cost = self.cost_model
        data["cost"] = cost.model_dump(mode="json") if cost else {}
        return data


def _deployment_config(table: dict[str, Any], name: str) -> DeploymentConfig:
    try:
        data = deployment_table({"deployment": table, "name": name})
        return DeploymentConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(error_lines(exc, "deployment")[0]) from None


def builtin_scenarios() -> dict[str, str]:
    """Built-in scenario names → their one-line descriptions."""
    out: dict[str, str] = {}
    for entry in sorted(resources.files(SCENARIO_PACKAGE).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text())
            out[entry.name[: -len(".toml")]] = str(data.get("description", ""))
    return out


def scenario_text(name_or_path: str) -> tuple[str, str]:
    """(TOML text, origin) of a built-in name or a file path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        try:
            return path.read_text(), str(path)
        except OSError as exc:
            raise UserError(f"scenario {name_or_path}: {exc.strerror or exc}") from None
    entry = resources.files(SCENARIO_PACKAGE) / f"{name_or_path}.toml"
    if not entry.is_file():
        known = ", ".join(builtin_scenarios())
        raise UserError(f"unknown scenario {name_or_path!r} (built-in: {known}; or a .toml file)")
    return entry.read_text(), f"built-in scenario {name_or_path}"


def parse_scenario(text: str, origin: str) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{origin}: not valid TOML: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = error_lines(exc)
        raise UserError(f"{origin}: invalid scenario: {lines[0]}", details=lines) from None


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file; one-line errors."""
    return parse_scenario(*scenario_text(name_or_path))
