"""Instance faults during a run: a scenario's ``[[faults]]`` (kill an instance at a time).

Owns killing one instance of a deployment — the process the harness started for it and
every process it started in turn (an engine's engine core and workers), by PID, with
SIGKILL, as a crash would — at its time from the run's start, and the record of what was
done (the manifest's ``deployment.faults``; the report marks each one). Processes are found
from ``/proc``; nothing outside the instance's own process tree is touched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pddbench.netem import nsutil


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> int:
    """SIGKILL ``pid`` and its descendants (found first: a killed parent's children are
    re-parented) and wait until they are gone. Returns how many were running."""
    victims = [p for p in (pid, *descendants(pid)) if nsutil.is_alive(p)]
    nsutil.kill_pids(victims)
    return len(victims)


@dataclass
class FaultRecord:
    """One fault as it happened (``t_mono``: this host's monotonic clock)."""

    kind: str  # "kill"
    instance: str
    at_s: float  # as scheduled, from the run's start
    t_mono: float | None = None
    t_unix: float | None = None
    pid: int | None = None
    processes: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultRun:
    """The scheduled kills of one deployment, on a timer thread from ``start``."""

    def __init__(self, kills: Sequence[tuple[float, str]], pids: Mapping[str, int]) -> None:
        self.records = [FaultRecord("kill", name, at) for at, name in sorted(kills)]
        self._pids = dict(pids)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, t0: float | None = None) -> None:
        if not self.records:
            return
        origin = time.monotonic() if t0 is None else t0
        self._thread = threading.Thread(target=self._run, args=(origin,), daemon=True)
        self._thread.start()

    def _run(self, origin: float) -> None:
        for rec in self.records:
            if self._stop.wait(max(0.0, origin + rec.at_s - time.monotonic())):
                return
            rec.t_mono, rec.t_unix = time.monotonic(), time.time()
            pid = self._pids.get(rec.instance)
            if pid is None:
                rec.error = f"no process for instance {rec.instance}"
                continue
            rec.pid = pid
            rec.processes = kill_tree(pid)

    def stop(self) -> list[FaultRecord]:
        """Cancel what has not happened yet; the records of what has."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return [r for r in self.records if r.t_mono is not None]
