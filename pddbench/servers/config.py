"""Deployment configuration of the reference servers: one validated tree, TOML or JSON.

Owns the shape of a deployment (architecture, model, instances with role, address,
datacenter, hardware and chip count, scheduler / routing / handoff policies, emulation byte
scale), the built-in deployments shipped as package data (``deployments/*.toml``), loading
by name or file, and turning problems into one-line :class:`~pddbench.errors.UserError` s.

Addresses are ``host:port``: ``address`` is where peers reach an instance, ``listen`` where
it binds (defaults to ``address``; differs behind NAT or a test link). Port 0 is allowed only
when one process hosts the whole deployment (the host resolves it before peers need it).
Must not start anything.
"""

from __future__ import annotations

import json
import tomllib
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pddbench.errors import UNKNOWN_KEY, UserError
from pddbench.servers import profiles
from pddbench.servers.compute import Machine, kv_capacity_tokens
from pddbench.servers.engine import SchedulerConfig
from pddbench.servers.handoff import HandoffPolicy, HandoffSchedule, HandoffTransfer
from pddbench.servers.routing import PipelinePolicy, RoutingPolicy, SelectionPolicy
from pddbench.servers.speculative import OFF, Speculation


class Role(StrEnum):
    PREFILL = "prefill"
    RELAY_DECODE = "relay-decode"
    MAIN_DECODE = "main-decode"
    DECODE = "decode"
    COLOCATED = "colocated"
    ROUTER = "router"


class Architecture(StrEnum):
    COLOCATED = "colocated"
    PD = "pd"  # P -> D (same-DC or cross-DC, with or without decode-side cache)
    PDD = "pdd"  # P -> MD or P -> RLD -> MD


_ROLES: dict[Architecture, tuple[set[Role], set[Role]]] = {  # (required, allowed)
    Architecture.COLOCATED: ({Role.COLOCATED}, {Role.COLOCATED}),
    Architecture.PD: ({Role.PREFILL, Role.DECODE}, {Role.PREFILL, Role.DECODE}),
    Architecture.PDD: (
        {Role.PREFILL, Role.MAIN_DECODE},
        {Role.PREFILL, Role.MAIN_DECODE, Role.RELAY_DECODE},
    ),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchedulerSettings(_Strict):
    chunk_tokens: int = Field(8192, ge=1)
    prefill_packing: bool = True  # pack chunks of several prompts into one step (SGLang)
    mixed_extend: bool = False  # run handoff extends inside decode steps (SGLang: apart)
    max_batch: int = Field(256, ge=1)
    step_overhead_s: float = Field(0.0005, ge=0)
    hbm_reserve_fraction: float = Field(0.1, ge=0, lt=1)
    max_catchup_s: float = Field(0.002, ge=0)

    def engine_config(self, speculation: Speculation = OFF) -> SchedulerConfig:
        return SchedulerConfig(
            chunk_tokens=self.chunk_tokens,
            prefill_packing=self.prefill_packing,
            mixed_extend=self.mixed_extend,
            max_batch=self.max_batch,
            step_overhead_s=self.step_overhead_s,
            hbm_reserve_fraction=self.hbm_reserve_fraction,
            speculation=speculation,
        )


class RoutingSettings(_Strict):
    pipeline_policy: PipelinePolicy = PipelinePolicy.HIT_RATE_AWARE
    ttft_target_s: float = Field(2.0, gt=0)
    uncached_threshold_tokens: int = Field(16384, ge=0)
    wan_bandwidth_gbps: float = Field(10.0, gt=0)  # prior (or fixed) WAN bandwidth
    bandwidth_source: str = Field("measured", pattern="^(measured|configured)$")
    allow_rld_only: bool = False  # ablation: finish low-hit relayed requests on RLD
    rld_only_max_hit: float = Field(0.5, ge=0, le=1)
    cache_aware: bool = True
    affinity_min_match: float = Field(0.5, ge=0, le=1)
    balance_abs: float = Field(4.0, ge=0)
    balance_rel: float = Field(1.5, ge=1)

    def policy(self) -> RoutingPolicy:
        return RoutingPolicy(
            pipeline=self.pipeline_policy,
            ttft_target_s=self.ttft_target_s,
            uncached_threshold_tokens=self.uncached_threshold_tokens,
            allow_rld_only=self.allow_rld_only,
            rld_only_max_hit=self.rld_only_max_hit,
        )

    def selection(self) -> SelectionPolicy:
        return SelectionPolicy(
            cache_aware=self.cache_aware,
            affinity_min_match=self.affinity_min_match,
            balance_abs=self.balance_abs,
            balance_rel=self.balance_rel,
        )


class SpeculativeSettings(_Strict):
    """Speculative decoding (MTP / EAGLE-style) on every instance that decodes (D, RLD, MD,
    colocated; P only computes the first token): ``draft_tokens`` verified per sequence per
    step (1 = off), each draft accepted with ``acceptance`` (consecutively; see
    :mod:`pddbench.servers.speculative`). A deployment-wide setting so that every system of
    a comparison decodes alike."""

    draft_tokens: int = Field(1, ge=1, le=16)
    acceptance: float = Field(0.0, ge=0, le=1)

    def speculation(self) -> Speculation:
        return Speculation(self.draft_tokens, self.acceptance)


class HandoffSettings(_Strict):
    schedule: HandoffSchedule = HandoffSchedule.ADAPTIVE
    transfer: HandoffTransfer = HandoffTransfer.EXTEND
    catch_up_threshold: int = Field(64, ge=1)
    adaptive_load_threshold: float = Field(0.5, ge=0)

    def policy(self) -> HandoffPolicy:
        return HandoffPolicy(
            self.schedule, self.transfer, self.catch_up_threshold, self.adaptive_load_threshold
        )


def _check_address(v: str) -> str:
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"address must be host:port, got {v!r}")
    return v


def _known(kind: str, name: str, known: dict[str, object]) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} profile {name!r}; known: {', '.join(sorted(known))}")
    return name


class InstanceConfig(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    role: Role
    address: str
    listen: str | None = None
    datacenter: str = "dc-a"
    hardware: str = "h800-sxm"
    chips: int = Field(16, ge=1)
    prefix_cache: bool = True  # radix prefix cache (the decode-side cache on D / MD)
    attention_dp: bool = False  # data-parallel attention (dense weights on every chip)
    # attention compute dtype (FlashAttention / FlashMLA): "fp8" runs FP8 attention kernels
    # (profiles' attention_fp8_speedup); the built-ins state it per instance, as their
    # calibration sources ran it (docs/calibration.md)
    attention_dtype: Literal["bf16", "fp8"] = "bf16"
    scheduler: SchedulerSettings | None = None

    _addr = field_validator("address", "listen")(lambda v: v if v is None else _check_address(v))

    _hardware = field_validator("hardware")(
        lambda v: _known("hardware", v, profiles.hardware_profiles())
    )

    @property
    def bind(self) -> str:
        return self.listen or self.address


class DeploymentConfig(_Strict):
    name: str
    architecture: Architecture
    description: str = ""
    model: str = "pdd-flagship-1t"
    seed: int = 0
    byte_scale: float = Field(1e-3, gt=0, le=1)
    block_size: int = Field(64, ge=1)
    eos_probability: float = Field(0.002, ge=0, lt=1)
    request_timeout_s: float = Field(600.0, gt=0)
    health_interval_s: float = Field(1.0, gt=0)
    health_timeout_s: float = Field(2.0, gt=0)
    health_failures: int = Field(3, ge=1)  # consecutive failed probes before "unreachable"
    # WAN KV transfers from one sender to one peer run at most this many at a time, in
    # order of arrival, over the transfer engine's persistent (pre-warmed, as many)
    # connections; unbounded, an overload opened hundreds of cold connections that shared
    # the line so that every transfer, and the session's next turn, came late
    kv_streams_per_peer: int = Field(2, ge=1, le=16)
    scheduler: SchedulerSettings = SchedulerSettings()
    routing: RoutingSettings = RoutingSettings()
    handoff: HandoffSettings = HandoffSettings()
    speculative: SpeculativeSettings = SpeculativeSettings()
    instances: list[InstanceConfig]

    _model = field_validator("model")(lambda v: _known("model", v, profiles.model_profiles()))

    @model_validator(mode="after")
    def _consistent(self) -> DeploymentConfig:
        ids = [i.id for i in self.instances]
        dup = {x for x in ids if ids.count(x) > 1}
        if dup:
            raise ValueError(f"duplicate instance ids: {', '.join(sorted(dup))}")
        binds = [i.bind for i in self.instances if not i.bind.endswith(":0")]
        dupb = {x for x in binds if binds.count(x) > 1}
        if dupb:
            raise ValueError(f"two instances bind the same address: {', '.join(sorted(dupb))}")
        routers = [i for i in self.instances if i.role is Role.ROUTER]
        if len(routers) != 1:
            raise ValueError(f"a deployment needs exactly one router, found {len(routers)}")
        roles = {i.role for i in self.instances} - {Role.ROUTER}
        required, allowed = _ROLES[self.architecture]
        if missing := required - roles:
            raise ValueError(
                f"architecture {self.architecture} needs roles: "
                + ", ".join(sorted(r.value for r in missing))
            )
        if extra := roles - allowed:
            raise ValueError(
                f"architecture {self.architecture} does not use roles: "
                + ", ".join(sorted(r.value for r in extra))
            )
        for idx, inst in enumerate(self.instances):
            if inst.role is not Role.ROUTER:
                try:
                    kv_capacity_tokens(
                        self.machine(inst), self.scheduler_for(inst).hbm_reserve_fraction
                    )
                except UserError as exc:  # a field problem: name the field
                    raise ValueError(f"instances[{idx}].chips ({inst.id}): {exc}") from None
        return self

    # -- derived ---------------------------------------------------------------------------
    def scheduler_for(self, inst: InstanceConfig) -> SchedulerSettings:
        return inst.scheduler or self.scheduler

    def speculation_for(self, inst: InstanceConfig) -> Speculation:
        """Speculative decoding of an instance: the deployment's on every decoding role, off
        on prefill (it computes only the first token, from the prompt's last position)."""
        if inst.role in (Role.PREFILL, Role.ROUTER):
            return OFF
        return self.speculative.speculation()

    def engine_config(self, inst: InstanceConfig) -> SchedulerConfig:
        return self.scheduler_for(inst).engine_config(self.speculation_for(inst))

    def machine(self, inst: InstanceConfig) -> Machine:
        return Machine(
            hardware=profiles.hardware(inst.hardware),
            chips=inst.chips,
            model=profiles.model(self.model),
            step_overhead_s=self.scheduler_for(inst).step_overhead_s,
            attention_dp=inst.attention_dp,
            attention_dtype=inst.attention_dtype,
        )

    def capacity_tokens(self, inst: InstanceConfig) -> int:
        return kv_capacity_tokens(self.machine(inst), self.scheduler_for(inst).hbm_reserve_fraction)

    def by_role(self, role: Role) -> list[InstanceConfig]:
        return [i for i in self.instances if i.role is role]

    def instance(self, instance_id: str) -> InstanceConfig:
        for i in self.instances:
            if i.id == instance_id:
                return i
        raise UserError(f"deployment {self.name} has no instance {instance_id!r}")

    @property
    def router(self) -> InstanceConfig:
        return self.by_role(Role.ROUTER)[0]

    def with_addresses(self, addresses: dict[str, str]) -> DeploymentConfig:
        """A copy where the instances named in ``addresses`` are reached (and bound) there."""
        insts = []
        for i in self.instances:
            if i.id in addresses:
                i = i.model_copy(update={"address": addresses[i.id], "listen": None})
            insts.append(i)
        return self.model_copy(update={"instances": insts})

    def shifted_ports(self, offset: int) -> DeploymentConfig:
        """A copy with every non-zero port moved by ``offset``."""

        def shift(a: str | None) -> str | None:
            if a is None:
                return None
            host, _, port = a.rpartition(":")
            if port == "0":
                return a
            moved = int(port) + offset
            if not 1 <= moved <= 65535:
                raise UserError(
                    f"moving the deployment by {offset:+d} puts {a} on port {moved}, "
                    "outside 1-65535"
                )
            return f"{host}:{moved}"

        insts = [
            i.model_copy(update={"address": shift(i.address), "listen": shift(i.listen)})
            for i in self.instances
        ]
        return self.model_copy(update={"instances": insts})


def error_lines(exc: ValidationError, prefix: str = "") -> list[str]:
    """One ``field.path: problem`` line per validation error (``instances[2].role: ...``).

    The path names the field as the file spells it (list items by index) under ``prefix``;
    an unknown key says so. A validator's message that starts with a path of its own
    (``instances[1].chips (p0): ...``) is joined onto the location instead of repeated."""
    lines = []
    for err in exc.errors():
        parts: list[str] = [prefix] if prefix else []
        for p in err["loc"]:
            if isinstance(p, int) and parts:
                parts[-1] += f"[{p}]"
            else:
                parts.append(str(p))
        loc = ".".join(parts)
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = UNKNOWN_KEY
        elif err["type"] in ("enum", "literal_error"):
            msg = f"got {err['input']!r}; {msg[:1].lower()}{msg[1:]}"
        head = msg.split(":", 1)[0]
        if ":" in msg and head and " " not in head.split(" (")[0] and ("." in head or "[" in head):
            lines.append(f"{loc}.{msg}" if loc and not head.startswith(loc) else msg)
        else:
            lines.append(f"{loc}: {msg}" if loc else msg)
    return lines


def parse_deployment(data: dict[str, Any], origin: str) -> DeploymentConfig:
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as exc:
        lines = error_lines(exc)
        raise UserError(f"{origin}: invalid deployment: {lines[0]}", details=lines) from None


SCENARIO_PACKAGE = "pddbench.scenarios"
LOOPBACK_BASE_PORT = 8000


def deployment_table(data: dict[str, Any]) -> dict[str, Any]:
    """The deployment in a scenario file (its ``[deployment]`` table) or a bare deployment.

    Instances without an ``address`` get loopback ports from 8000 in declaration order
    (the harness assigns addresses itself when it deploys into emulated namespaces).
    """
    if isinstance(data.get("deployment"), dict):
        dep = dict(data["deployment"])
        dep.setdefault("name", data.get("name", "deployment"))
        dep.setdefault("description", data.get("description", ""))
    else:
        dep = dict(data)
    instances = []
    for i, inst in enumerate(dep.get("instances") or []):
        if isinstance(inst, dict) and "address" not in inst:
            inst = {**inst, "address": f"127.0.0.1:{LOOPBACK_BASE_PORT + i}"}
        instances.append(inst)
    dep["instances"] = instances
    return dep


def builtin_deployments() -> list[str]:
    """Built-in scenarios that run reference servers (``pddbench/scenarios/*.toml``)."""
    folder = resources.files(SCENARIO_PACKAGE)
    return sorted(
        p.name[:-5]
        for p in folder.iterdir()
        if p.name.endswith(".toml") and "[deployment]" in p.read_text("utf-8")
    )


def load_deployment(name_or_path: str) -> DeploymentConfig:
    """The deployment of a built-in scenario by name, or of a scenario/deployment file."""
    if name_or_path in builtin_deployments():
        res = resources.files(SCENARIO_PACKAGE).joinpath(name_or_path + ".toml")
        data = tomllib.loads(res.read_text("utf-8"))
        return parse_deployment(deployment_table(data), name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise UserError(
            f"no deployment {name_or_path!r}: not a built-in "
            f"({', '.join(builtin_deployments())}) and no such file"
        )
    try:
        text = path.read_text("utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: cannot read deployment: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a deployment must be a table/object")
    return parse_deployment(deployment_table(data), str(path))
