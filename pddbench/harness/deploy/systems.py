"""Deployment: bring a scenario's systems up (emulated network or loopback), health, teardown.

Owns starting instances as processes — reference servers through the same
instance-command path as real engines — waiting until they are healthy (on failure: which
instance, its exit status and the tail of its log), giving the replay a front-door URL and
a way to run the client where the scenario places it, probing the emulated links before
traffic starts (refusing to start when they are off), and tearing everything down on
success, error, Ctrl-C or SIGTERM.

* Emulated (a ``[network]`` and root): one namespace per instance via ``pddbench.netem``;
  each reference instance is one host process in its namespace; the client runs in the
  ``client`` namespace, in a thread of its own bound to it
  (:func:`~pddbench.harness.drive.netns.run_in_client_netns`, entered once per run by
  ``jobs/run_system``): the main thread never enters an emulated namespace. What must
  happen from the client's side before traffic (every instance healthy, the reference
  servers' KV connections prewarmed, then the ``[network.schedule]`` started) is the
  deployment's :class:`Readiness`, which that run calls first; it runs once per
  deployment.
* Loopback (no ``[network]``, or ``--no-emulation``): reference instances in one host
  process on 127.0.0.1 ports chosen by the OS; engines on their configured ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from pddbench.errors import UserError
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.deploy.faults import FaultRun
from pddbench.harness.deploy.lifeline import Lifeline, child_setup
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.sections import DeploymentInfo

REFERENCE_PORT = 8000
T = TypeVar("T")


@dataclass
class Instance:
    """A started process of the deployment."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    url: str | None = None  # base URL, when known
    health_path: str = "/health"
    startup_timeout_s: float = 60.0


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _terminate(
    procs: list[subprocess.Popen[bytes]], timeout_s: float = 5.0, *, groups: bool = False
) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``; ``groups``: each process leads its own
    session, and its whole group (an engine's workers too) gets the signals."""

    def signal_(p: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if groups:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)

    for p in procs:
        if p.poll() is None:
            signal_(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_(p, signal.SIGKILL)
            p.wait()
        if groups:  # the leader is gone; what is left of its group goes now
            signal_(p, signal.SIGKILL)


def _http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(instances: list[Instance]) -> None:
    """Poll every instance's health URL until all answer; fail with the culprit's story."""
    pending = [i for i in instances if i.url is not None]
    start = time.monotonic()
    while pending:
        for inst in list(pending):
            code = inst.proc.poll()
            if code is not None:
                raise UserError(
                    f"instance {inst.name} exited with status {code} during start-up: "
                    f"{log_tail(inst.log) or '(empty log)'} [log: {inst.log}]"
                )
            if _http_ok(f"{inst.url}{inst.health_path}"):
                pending.remove(inst)
            elif time.monotonic() - start > inst.startup_timeout_s:
                raise UserError(
                    f"instance {inst.name} not healthy after {inst.startup_timeout_s:g} s "
                    f"({inst.url}{inst.health_path}): {log_tail(inst.log) or '(empty log)'}"
                )
        if pending:
            time.sleep(0.1)


def _read_announcements(
    proc: subprocess.Popen[bytes], log: Path, timeout_s: float
) -> dict[str, str]:
    """``instance <id> <role> <url>`` lines of a host process until ``ready``."""
    assert proc.stdout is not None
    urls: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    with open(log, "ab") as sink:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                code = proc.wait(timeout=5)
                raise UserError(
                    f"reference host exited with status {code} during start-up: "
                    f"{log_tail(log) or '(empty log)'}"
                )
            sink.write(line)
            sink.flush()
            words = line.decode(errors="replace").split()
            if words[:1] == ["instance"] and len(words) >= 4:
                urls[words[1]] = words[3]
            elif words[:1] == ["ready"]:
                return urls
    raise UserError(f"reference host not ready after {timeout_s:g} s: {log_tail(log)}")


def _drain(stream: IO[bytes] | None, log: Path) -> None:
    """Copy the rest of a child's stdout into its log (in a daemon thread)."""

    if stream is None:
        return

    def pump() -> None:
        with open(log, "ab") as sink:
            for line in stream:
                sink.write(line)
                sink.flush()

    threading.Thread(target=pump, daemon=True).start()


def reference_deployment(scenario: Scenario, addresses: dict[str, str]) -> dict[str, Any]:
    """The reference deployment with instance addresses and the emulation byte scale."""
    assert scenario.deployment is not None
    dep = scenario.deployment.model_dump(mode="json", exclude_unset=True)
    dep.setdefault("name", scenario.name)
    if scenario.network is not None:
        dep["byte_scale"] = scenario.byte_scale
    for inst in dep["instances"]:
        inst["address"] = addresses[inst["id"]]
        inst.pop("listen", None)
    return dep


def _engine_argv(engine: Any, host: str, paths: RunPaths, addresses: dict[str, str]) -> list[str]:
    values = {
        "host": host,
        "port": str(engine.port),
        "python": sys.executable,
        "name": engine.name,
        "run_dir": str(paths.root),
        "addr": addresses,  # {addr[NAME]}: instance NAME's host:port
        "hostof": {n: a.rpartition(":")[0] for n, a in addresses.items()},  # {hostof[NAME]}
    }
    try:
        return [part.format(**values) for part in engine.command]
    except (KeyError, IndexError) as exc:
        raise UserError(f"engine {engine.name}: unknown placeholder {exc} in command") from None


@contextlib.contextmanager
def _loopback(
    scenario: Scenario, paths: RunPaths
) -> Iterator[tuple[DeploymentInfo, list[Instance]]]:
    procs: list[subprocess.Popen[bytes]] = []
    instances: list[Instance] = []
    info = DeploymentInfo(mode="loopback")
    lifeline = Lifeline()  # the servers die with the harness, even on SIGKILL
    try:
        if scenario.is_reference:
            addresses = {name: "127.0.0.1:0" for name, _ in scenario.instance_sites()}
            cfg = paths.root / "deployment.json"
            cfg.write_text(json.dumps(reference_deployment(scenario, addresses), indent=1))
            log = paths.logs / "reference-host.log"
            proc = subprocess.Popen(
                [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg)],
                stdout=subprocess.PIPE,
                stderr=open(log, "ab"),  # noqa: SIM115
                start_new_session=True,
                preexec_fn=child_setup(),
            )
            procs.append(proc)
            lifeline.watch(proc.pid)
            urls = _read_announcements(proc, log, scenario.startup_timeout_s)
            _drain(proc.stdout, log)
            for name, url in urls.items():
                instances.append(
                    Instance(name, proc, log, url, "/health", scenario.startup_timeout_s)
                )
        else:
            local = {e.name: f"127.0.0.1:{e.port}" for e in scenario.engines}
            for engine in scenario.engines:
                log = paths.logs / f"{engine.name}.log"
                argv = _engine_argv(engine, "127.0.0.1", paths, local)
                with open(log, "ab") as sink:  # the child keeps its own copy of the fd
                    proc = subprocess.Popen(
                        argv,
                        stdout=sink,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, **engine.env},
                        start_new_session=True,
                        preexec_fn=child_setup(),
                    )
                procs.append(proc)
                lifeline.watch(proc.pid)
                instances.append(
                    Instance(
                        engine.name,
                        proc,
                        log,
                        f"http://127.0.0.1:{engine.port}",
                        engine.health_path,
                        engine.startup_timeout_s,
                    )
                )
        wait_healthy(instances)
        info.instances = {i.name: i.url or "" for i in instances}
        info.pids = {i.name: i.proc.pid for i in instances}
        info.front_door = info.instances[scenario.front_door_name]
        yield info, instances
    finally:
        _terminate(procs, groups=True)
        lifeline.release()


@contextlib.contextmanager
def _emulated(
    scenario: Scenario, paths: RunPaths, *, probe: bool, check_probes: bool
) -> Iterator[tuple[DeploymentInfo, list[Instance], str, Readiness]]:
    from pddbench.netem.topology import Topology, new_run_id

    config = scenario.network_config()
    with Topology.up(config, new_run_id()) as topo:
        from pddbench.netem.probe import write_link_probes

        info = DeploymentInfo(mode="emulated")
        instances: list[Instance] = []
        probes: list[Any] = []
        if probe:
            probes = topo.probe(bulk_seconds=1.0)
            if probes:  # a single-site topology has no WAN link to probe
                write_link_probes(probes, str(paths.links))
            info.links = [asdict(p) for p in probes]
            if check_probes:
                _check_probes(probes, scenario)
        port = {e.name: e.port for e in scenario.engines}
        addresses = {
            name: f"{topo.address(name)}:{port.get(name, REFERENCE_PORT)}"
            for name, _ in scenario.instance_sites()
        }
        if scenario.is_reference:
            dep = reference_deployment(scenario, addresses)
            for name, _ in scenario.instance_sites():
                cfg = paths.root / f"host-{name}.json"
                cfg.write_text(json.dumps({"deployment": dep, "serve": [name]}, indent=1))
                log = paths.logs / f"{name}.log"
                proc = topo.spawn(
                    name,
                    [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg)],
                    log_path=log,
                )
                instances.append(
                    Instance(
                        name,
                        proc,
                        log,
                        f"http://{addresses[name]}",
                        "/health",
                        scenario.startup_timeout_s,
                    )
                )
        else:
            for engine in scenario.engines:
                log = paths.logs / f"{engine.name}.log"
                argv = _engine_argv(engine, topo.address(engine.name), paths, addresses)
                proc = topo.spawn(engine.name, argv, env=engine.env, log_path=log)
                instances.append(
                    Instance(
                        engine.name,
                        proc,
                        log,
                        f"http://{addresses[engine.name]}",
                        engine.health_path,
                        engine.startup_timeout_s,
                    )
                )
        client_ns = topo.netns("client")
        info.instances = {i.name: i.url or "" for i in instances}
        info.pids = {i.name: i.proc.pid for i in instances}
        info.front_door = info.instances[scenario.front_door_name]
        info.topology = json.loads(json.dumps(topo.report(), default=_jsonable))

        faults = _fault_run(scenario, info)

        def from_client() -> None:
            info.prewarmed = _ready(scenario, instances)
            # [network.schedule]: from the replay's start (its thread enters namespaces
            # by path, wherever it is started from)
            wans.append(topo.start_wan_schedule())
            faults.start()

        wans: list[Any] = []
        try:
            yield info, instances, client_ns, Readiness(from_client, topo.wan_bytes, faults)
        finally:
            faults.stop()
            _terminate([i.proc for i in instances])
            wan = wans[0] if wans else None
            if wan is not None:  # the schedule's timeline joins the probes in links.parquet
                write_link_probes(probes, str(paths.links), wan.stop())


def _fault_run(scenario: Scenario, info: DeploymentInfo) -> FaultRun:
    """The scenario's ``[[faults]]`` against this deployment's processes (not started)."""
    return FaultRun([(f.at_s, f.kill) for f in scenario.faults], info.pids)


class Readiness:
    """What a deployment still needs from the client's side before its first request
    (health from there, prewarm, the WAN schedule's start): done once, by the first run
    that calls it, in the client's namespace; later calls do nothing."""

    def __init__(
        self,
        work: Callable[[], None] | None,
        wan_bytes: Callable[[], dict[str, dict[str, int]]] | None = None,
        faults: FaultRun | None = None,
    ) -> None:
        self._work = work
        self._lock = threading.Lock()
        self._wan_bytes = wan_bytes
        self.faults = faults

    def fault_records(self) -> list[dict[str, Any]]:
        """The scenario's ``[[faults]]`` that have happened so far."""
        if self.faults is None:
            return []
        return [r.to_json() for r in self.faults.records if r.t_mono is not None]

    def wan_bytes(self) -> dict[str, dict[str, int]] | None:
        """Bytes each emulated WAN direction has carried so far, by traffic class (None:
        no emulated WAN)."""
        return self._wan_bytes() if self._wan_bytes is not None else None

    def __call__(self) -> None:
        with self._lock:
            work, self._work = self._work, None
        if work is not None:
            work()


def _ready(scenario: Scenario, instances: list[Instance]) -> list[Any]:
    """From the client's side: every instance healthy, then (reference servers) prewarmed;
    the prewarm results."""
    wait_healthy(instances)
    if not scenario.is_reference:
        return []
    from pddbench.harness.deploy.prewarm import prewarm

    return prewarm(scenario, {i.name: i.url or "" for i in instances})


def _jsonable(obj: object) -> object:
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)  # type: ignore[arg-type]
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")  # type: ignore[union-attr]
    return str(obj)


def _check_probes(probes: list[Any], scenario: Scenario) -> None:
    """Refuse to run when a link measures outside the scenario's probe tolerance."""
    from pddbench.netem.probe import ProbeTolerance, check_probe

    tolerance = ProbeTolerance(**scenario.probe_tolerance.model_dump())
    problems = [line for p in probes for line in check_probe(p, tolerance)]
    if problems:
        raise UserError(f"link probes are off the configuration: {problems[0]}", details=problems)


def emulation_problem() -> str | None:
    """Why the WAN cannot be emulated on this machine, or None when it can.

    Needs root (namespaces) and either the kernel's netem or nf_tables with the xt
    NFQUEUE target (the userspace delay stage, steered over netlink).
    """
    from pddbench.netem.backend import emulation_problem as problem

    return problem()


@contextlib.contextmanager
def deploy(
    scenario: Scenario,
    paths: RunPaths,
    *,
    emulate: bool = True,
    probe: bool = True,
    check_probes: bool = True,
) -> Iterator[tuple[DeploymentInfo, str | None, Readiness]]:
    """Bring ``scenario`` up; yields (info, client namespace or None for loopback, its
    :class:`Readiness`, to be called from the client's side before the first request).

    An ``emulation_scale = "auto"`` is resolved here for this machine's backend (the
    replay pipeline resolves it earlier, to record it)."""
    if scenario.emulation_scale == "auto":
        from pddbench.netem.backend import backend_here

        scenario = scenario.resolved(backend_here())
    if emulate and scenario.network is not None:
        with _emulated(scenario, paths, probe=probe, check_probes=check_probes) as (
            info,
            _,
            ns,
            ready,
        ):
            yield info, ns, ready
    else:
        if scenario.faults and scenario.is_reference:
            raise UserError(
                f"scenario {scenario.name}: [[faults]] kill one instance's process, and on "
                "loopback the reference servers share one: run it with the emulated WAN"
            )
        with _loopback(scenario, paths) as (info, _):
            faults = _fault_run(scenario, info)
            try:
                yield info, None, Readiness(faults.start, faults=faults)
            finally:
                faults.stop()
