"""Remove emulation debris: processes in our namespaces, the namespaces, the state files.

``cleanup()`` with no target removes everything named with the ``pddb`` prefix that no
live run owns (a run whose owner process was SIGKILLed, or namespaces without a state
file); ``cleanup("ab12")`` removes run ``ab12`` (live or not); ``cleanup(all=True)``
removes every ``pddb*`` namespace. Processes are found by namespace inode under
``/proc/*/ns/net`` — only processes inside our namespaces are ever killed — and are gone
before the namespace is deleted (deleting first would leave them running and keeping
their links alive). Links live only inside our namespaces, so they go with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pddbench.netem import nsutil
from pddbench.netem.plan import PREFIX, netns_prefix
from pddbench.netem.state import RunState, load_states, process_start_ticks


@dataclass
class CleanupReport:
    namespaces_removed: list[str] = field(default_factory=list)
    processes_killed: list[int] = field(default_factory=list)
    state_files_removed: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"removed {len(self.namespaces_removed)} namespaces, killed"
            f" {len(self.processes_killed)} processes, removed"
            f" {len(self.state_files_removed)} state files"
        )
        if self.left_behind:
            text += "; could not remove: " + ", ".join(self.left_behind)
        return text


def _target_prefix(target: str) -> str:
    return target if target.startswith(PREFIX) else netns_prefix(target)


def cleanup(target: str | None = None, *, all: bool = False) -> CleanupReport:
    """Remove debris of one run / prefix, of dead runs (default), or of all runs (``all``)."""
    states = load_states()
    if all:
        doomed_states = states
        names = nsutil.list_netns(PREFIX)
    elif target is not None:
        prefix = _target_prefix(target)
        doomed_states = [s for s in states if s.prefix.startswith(prefix)]
        names = nsutil.list_netns(prefix)
    else:
        live = [s.prefix for s in states if s.owner_alive()]
        doomed_states = [s for s in states if not s.owner_alive()]
        names = [n for n in nsutil.list_netns(PREFIX) if not any(n.startswith(p) for p in live)]
    return remove_namespaces(names, doomed_states)


def remove_namespaces(names: list[str], states: list[RunState]) -> CleanupReport:
    """Kill every process inside ``names`` (and recorded in ``states``), then delete them."""
    report = CleanupReport()
    inodes: dict[str, int] = {}
    for name in names:
        try:
            inodes[name] = nsutil.netns_inode(name)
        except OSError:
            continue
    victims = set(nsutil.pids_in_netns(set(inodes.values())))
    for state in states:
        for proc in state.processes:
            if proc.start_ticks is not None and process_start_ticks(proc.pid) == proc.start_ticks:
                victims.add(proc.pid)
    victims.discard(0)
    alive = nsutil.kill_pids(sorted(victims))
    report.processes_killed = sorted(victims - set(alive))
    report.left_behind += [f"pid {p}" for p in alive]
    for name in names:
        try:
            nsutil.remove_netns(name)
            report.namespaces_removed.append(name)
        except OSError as exc:
            report.left_behind.append(f"{name} ({exc.strerror})")
    for state in states:
        state.remove()
        report.state_files_removed.append(state.path)
    return report
