"""The userspace delay stage of one link direction: an NFQUEUE verdict daemon.

Run as ``python -m pddbench.netem.delayd --queue N ...`` inside the sending switch's
namespace (``links`` starts it there with PDEATHSIG and installs the NFQUEUE steering
rule, ``nftables``, once it reports ready). Packets stay in the kernel; this process sees only their
ids, asks ``DelayLine`` when each is due, and releases due packets in order with one
batched verdict. Waits are precise without burning a core: the timer slack is set to
1 ns, ``select`` sleeps until the deadline minus its learned wake-up lateness (a running
average) and a short spin (``--margin-us``) finishes it. It tries SCHED_FIFO. It never
relays packet bytes.

Control protocol (JSON lines): stdin takes ``{"cmd": "set", ...DelaySettings fields}``
(optionally ``"lead_us"``: the stage latency to offset, as calibrated by ``topology``)
and ``{"cmd": "stats"}``; stdout answers each with one JSON line (``{"ready": ...}`` first).
EOF on stdin ends the daemon; so does the death of its parent (PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import select
import sys
import time
from dataclasses import asdict

from pddbench.netem.delayline import DelayLine, DelaySettings
from pddbench.netem.nfqueue import QueueSocket
from pddbench.netem.nsutil import PR_SET_TIMERSLACK, prctl


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pddbench.netem.delayd")
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--maxlen", type=int, default=100_000)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--jitter-dist", choices=("uniform", "normal"), default="uniform")
    p.add_argument("--loss-pct", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--margin-us", type=float, default=20.0, help="spin beyond learned oversleep")
    p.add_argument("--lead-us", type=float, default=0.0)
    p.add_argument("--fifo-priority", type=int, default=10, help="0 disables SCHED_FIFO")
    return p.parse_args(argv)


def _realtime(priority: int) -> str:
    with contextlib.suppress(OSError):
        prctl(PR_SET_TIMERSLACK, 1)
    if priority <= 0:
        return "off"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return "fifo"
    except OSError as exc:
        return f"denied ({exc.strerror})"


def _reply(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(args: argparse.Namespace) -> int:
    settings = DelaySettings(
        delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms,
        jitter_dist=args.jitter_dist,
        loss_pct=args.loss_pct,
    )
    line = DelayLine(settings, random.Random(args.seed), lead_us=args.lead_us)
    sched = _realtime(args.fifo_priority)
    queue = QueueSocket(args.queue, maxlen=args.maxlen)
    control = sys.stdin.fileno()
    os.set_blocking(control, False)
    pending = b""
    margin_ns = int(args.margin_us * 1000)
    oversleep_ns = 50_000  # learned: how late select() wakes up after its timeout
    mono = time.monotonic_ns
    gc.disable()
    _reply({"ready": True, "pid": os.getpid(), "queue": args.queue, "sched": sched})
    readers = [queue.fileno(), control]
    while True:
        now = mono()
        last = line.pop_due(now)
        if last >= 0:
            queue.release_upto(last)
        due = line.next_due_ns()
        timeout_ns = -1
        if due is not None:
            early = oversleep_ns + margin_ns
            wait = due - mono()
            if wait <= early:  # too close to sleep: spin the rest (a few tens of µs)
                while mono() < due:
                    pass
                continue
            timeout_ns = wait - early
        slept_from = mono()
        ready, _, _ = select.select(readers, [], [], None if timeout_ns < 0 else timeout_ns / 1e9)
        if not ready:
            late = mono() - slept_from - timeout_ns
            oversleep_ns += (min(max(late, 0), 2_000_000) - oversleep_ns) >> 3
            continue
        if readers[0] in ready:
            for packet_id in queue.recv_packets():
                if not line.admit(packet_id, mono()):
                    queue.drop(packet_id)
        if control in ready:
            chunk = os.read(control, 65536)
            if not chunk:
                queue.close()
                return 0
            pending += chunk
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                if raw.strip():
                    _handle(json.loads(raw), line)


def _handle(cmd: dict[str, object], line: DelayLine) -> None:
    kind = cmd.pop("cmd", None)
    if kind == "set":
        lead = cmd.pop("lead_us", None)
        if isinstance(lead, int | float):
            line.set_lead(float(lead))
        fields = {**line.settings.to_dict(), **cmd}
        line.update(DelaySettings(**fields))  # type: ignore[arg-type]
        settings = line.settings.to_dict()
        _reply(
            {
                "ok": True,
                "t_mono_ns": time.monotonic_ns(),
                "settings": settings,
                "lead_us": line.lead_us,
            }
        )
    elif kind == "stats":
        late = sorted(line.lateness_ns)
        lateness = {}
        if late:
            lateness = {
                "late_p50_us": late[len(late) // 2] / 1000,
                "late_p99_us": late[min(len(late) - 1, int(len(late) * 0.99))] / 1000,
                "late_max_us": late[-1] / 1000,
            }
        _reply({"ok": True, "held": len(line), **asdict(line.stats), **lateness})
    else:
        _reply({"ok": False, "error": f"unknown command {kind!r}"})


def main(argv: list[str] | None = None) -> int:
    return serve(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())
