"""The run state file: what a topology created, so that anyone can remove it later.

One JSON file per run under ``/run/pddbench/`` (or ``/tmp/pddbench/`` where /run is not
writable): run id, owning process, namespace names with their inodes, processes started
in them, the network configuration and the backends chosen. Written atomically and
updated as the topology grows, so a SIGKILLed owner still leaves a complete record.
This module does file I/O only; it never touches namespaces or processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

STATE_DIRS = ("/run/pddbench", "/tmp/pddbench")


def state_dir() -> str:
    for d in STATE_DIRS:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return d
    raise OSError("no writable state directory among " + ", ".join(STATE_DIRS))


def process_start_ticks(pid: int) -> int | None:
    """The start time of a live ``pid`` (clock ticks since boot), to tell a reused pid apart.

    None when there is no such process or it is a zombie (it has exited).
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class ProcessRecord:
    pid: int
    netns: str
    role: str
    start_ticks: int | None = None


@dataclass
class RunState:
    run_id: str
    prefix: str
    owner_pid: int
    owner_start_ticks: int | None
    created_unix: float
    namespaces: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    network: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, str] = field(default_factory=dict)
    scenario: str = ""  # what the user named (`netem down --scenario` finds runs by it)
    path: str = ""

    @classmethod
    def new(cls, run_id: str, prefix: str, network: dict[str, Any], scenario: str = "") -> RunState:
        me = os.getpid()
        state = cls(
            run_id=run_id,
            prefix=prefix,
            owner_pid=me,
            owner_start_ticks=process_start_ticks(me),
            created_unix=time.time(),
            network=network,
            scenario=scenario,
        )
        state.path = os.path.join(state_dir(), f"{prefix.rstrip('-')}.json")
        return state

    def owner_alive(self) -> bool:
        ticks = process_start_ticks(self.owner_pid)
        return ticks is not None and ticks == self.owner_start_ticks

    def save(self) -> None:
        data = asdict(self)
        data.pop("path")
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def load_states() -> list[RunState]:
    """Every readable run state file in every state directory."""
    out = []
    for d in STATE_DIRS:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(d, name)
            try:
                with open(path) as f:
                    data = json.load(f)
                procs = [ProcessRecord(**p) for p in data.pop("processes", [])]
                state = RunState(**data, processes=procs)
            except (OSError, ValueError, TypeError):
                continue
            state.path = path
            out.append(state)
    return out
