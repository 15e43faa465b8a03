"""Shaping of one WAN link direction in the kernel and, where netem is missing, the delay daemon.

``ShapedDirection`` installs the traffic-control tree that ``shaping`` describes on the
egress interface of the sending switch, starts the NFQUEUE delay daemon (``delayd``)
inside that switch's namespace and installs the NFQUEUE steering rule over netlink
(``nftables``; no iptables binary) once the daemon has bound its queue, and applies
runtime changes (rate, delay, jitter, loss, down/up).
It owns those kernel objects and that process; it must not decide names or backends.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from pddbench.errors import UserError
from pddbench.netem import nsutil
from pddbench.netem.delayline import DelaySettings
from pddbench.netem.nftables import QueueRule, install_queue_rules
from pddbench.netem.plan import DirectionPlan
from pddbench.netem.shaping import (
    HTB_BULK,
    HTB_CLASS,
    ShapingBackend,
    TcRequest,
    change_requests,
    delay_line_limit_pkts,
    shaping_requests,
)
from pddbench.netem.topology_config import Shape

DAEMON_START_TIMEOUT_S = 20.0


def apply_tc(netns: str, ifname: str, requests: list[TcRequest]) -> None:
    """Send ``requests`` for interface ``ifname`` inside namespace ``netns``."""

    def send(ipr: Any) -> None:
        index = ipr.link_lookup(ifname=ifname)[0]
        for req in requests:
            ipr.tc(req.command, req.kind, index, req.handle, **req.kwargs)

    nsutil.with_iproute(netns, send)


def _class_counts(msg: Any) -> tuple[int, int]:
    """(bytes, packets) of a tc class message (TCA_STATS2's basic stats, else TCA_STATS)."""
    stats2 = msg.get_attr("TCA_STATS2")
    if stats2 is not None:
        basic = stats2.get_attr("TCA_STATS_BASIC")
        if basic is not None:
            return int(basic["bytes"]), int(basic["packets"])
    stats = msg.get_attr("TCA_STATS")
    return (int(stats["bytes"]), int(stats["packets"])) if stats is not None else (0, 0)


class DelayDaemon:
    """A running ``delayd`` process and its JSON-lines control channel."""

    def __init__(
        self, netns: str, queue_num: int, shape: Shape, seed: int | None, lead_us: float
    ) -> None:
        self.netns = netns
        self.queue_num = queue_num
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the daemon
        argv = [
            sys.executable,
            "-m",
            "pddbench.netem.delayd",
            "--queue",
            str(queue_num),
            "--maxlen",
            str(delay_line_limit_pkts(shape)),
            "--delay-ms",
            repr(shape.delay_ms),
            "--jitter-ms",
            repr(shape.jitter_ms),
            "--jitter-dist",
            shape.jitter_dist,
            "--loss-pct",
            repr(shape.loss_pct),
            "--lead-us",
            repr(lead_us),
        ]
        if seed is not None:
            argv += ["--seed", str(seed)]
        self.proc = nsutil.spawn(
            netns, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._buffer = b""
        self._lock = threading.Lock()
        self.info: dict[str, Any] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = DAEMON_START_TIMEOUT_S) -> dict[str, Any]:
        self.info = self._read_line(timeout_s)
        if not self.info.get("ready"):
            raise RuntimeError(f"delay daemon did not start: {self.info}")
        return self.info

    def _read_line(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"delay daemon (pid {self.pid}) did not answer: {self._tail()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"delay daemon (pid {self.pid}) exited: {self._tail()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip().splitlines()
        return text[-1] if text else "(no stderr)"

    def command(self, cmd: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
            return self._read_line(timeout_s)

    def stop(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


class ShapedDirection:
    """One shaped link direction: tc tree on the egress, plus the delay daemon if nfqueue."""

    def __init__(self, plan: DirectionPlan, backend: ShapingBackend, reason: str) -> None:
        self.plan = plan
        self.backend = backend
        self.reason = reason
        self.shape = plan.shape  # effective, current
        self.down = False
        self.daemon: DelayDaemon | None = None

    def start_daemon(self, seed: int | None = None, lead_us: float = 0.0) -> DelayDaemon | None:
        """Start the delay daemon (nfqueue backend); call ``install`` after it is ready."""
        if self.backend == "nfqueue":
            self.daemon = DelayDaemon(
                self.plan.netns, self.plan.queue_num, self.shape, seed, lead_us
            )
        return self.daemon

    def install(self) -> None:
        apply_tc(self.plan.netns, self.plan.ifname, shaping_requests(self.backend, self.shape))
        if self.daemon is not None:
            self.daemon.wait_ready()
            rule = QueueRule(self.plan.ifname, self.plan.queue_num)
            try:
                nsutil.run_in_netns(self.plan.netns, install_queue_rules, [rule])
            except OSError as exc:
                raise UserError(
                    f"cannot steer {self.plan.key} into its delay stage: {exc}"
                ) from exc

    def apply(self, shape: Shape, down: bool) -> None:
        """Make ``shape`` (effective values) and ``down`` current."""
        requests = change_requests(self.backend, self.shape, shape, down=down)
        if requests:
            apply_tc(self.plan.netns, self.plan.ifname, requests)
        self.apply_delay_only(DelaySettings.from_shape(shape, down=down))
        self.shape = shape
        self.down = down

    def apply_delay_only(self, settings: DelaySettings, lead_us: float | None = None) -> None:
        """Set the delay stage alone (not ``self.shape``): used to calibrate its latency."""
        if self.daemon is None:
            return
        cmd: dict[str, Any] = {"cmd": "set", **settings.to_dict()}
        if lead_us is not None:
            cmd["lead_us"] = lead_us
        reply = self.daemon.command(cmd)
        if not reply.get("ok"):
            raise RuntimeError(f"delay daemon refused the change: {reply}")

    def class_bytes(self) -> dict[str, int]:
        """Bytes and packets this direction's egress has sent so far, by traffic class:
        ``bulk`` (the DSCP-marked class) and ``control`` (everything else; all of it in a
        FIFO layout); ``<class>_packets`` beside each. Frames as the qdisc saw them:
        Ethernet, IP and TCP headers included (one per packet)."""

        def read(ipr: Any) -> dict[str, int]:
            index = ipr.link_lookup(ifname=self.plan.ifname)[0]
            out = {"control": 0, "control_packets": 0, "bulk": 0, "bulk_packets": 0}
            for msg in ipr.get_classes(index=index):
                name = {HTB_CLASS: "control", HTB_BULK: "bulk"}.get(msg["handle"])
                if name is not None:
                    out[name], out[f"{name}_packets"] = _class_counts(msg)
            return out

        return nsutil.with_iproute(self.plan.netns, read)

    def stats(self) -> dict[str, Any]:
        if self.daemon is None:
            return {}
        return self.daemon.command({"cmd": "stats"})

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
