"""One timed TCP transfer between two emulated hosts, on a fresh or a pre-warmed connection.

Used by ``bench/bench_netem.py`` and the schedule test to time what a KV transfer engine
does: a *warm* connection is opened once and pushed :data:`WARM_BDPS` bandwidth-delay
products (so the window is open, as on a transfer engine's long-lived peer connection),
then left idle before the timed transfer; a *cold* one is connected inside the timing and,
with slow-start compensation, waits the modelled missing time (``slowstart.missing_s``)
before its first byte, as the reference servers' KV senders do.
Both ends live in this process (threads bound to the two namespaces), so one clock times
from the first byte sent to the last byte received. Sockets use the network's congestion
control. Must not shape anything.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

from pddbench.netem import nsutil
from pddbench.netem.probe import Endpoint
from pddbench.netem.tcp import set_congestion

WARM_BDPS = 4
_HDR = struct.Struct("!Q")
_CHUNK = memoryview(bytes(4 << 20))


@dataclass(frozen=True)
class TransferTime:
    seconds: float  # first byte sent -> last byte received
    connect_s: float  # 0 on a warm connection
    nbytes: int
    compensated_s: float = 0.0  # slow-start compensation waited (cold only)


class Pair:
    """A connection from ``src`` to ``dst``; ``send(n)`` times one message of n bytes."""

    def __init__(self, src: Endpoint, dst: Endpoint, congestion: str) -> None:
        self.src, self.dst, self.congestion = src, dst, congestion
        self._lsock = nsutil.run_in_netns(dst.netns, self._listener)
        self._sock: socket.socket | None = None
        self._conn: socket.socket | None = None
        self.connect_s = 0.0

    def _listener(self) -> socket.socket:
        s = socket.socket()
        set_congestion(s, self.congestion)
        s.bind((self.dst.address, 0))
        s.listen(1)
        return s

    def connect(self) -> None:
        def make() -> socket.socket:
            s = socket.socket()
            set_congestion(s, self.congestion)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as aiohttp's are
            return s

        self._sock = nsutil.run_in_netns(self.src.netns, make)
        t0 = time.perf_counter()
        self._sock.connect(self._lsock.getsockname())
        self.connect_s = time.perf_counter() - t0
        self._conn, _ = self._lsock.accept()

    def send(self, nbytes: int, cold_wait_s: float = 0.0) -> TransferTime:
        """Send one ``nbytes`` message (connecting first, inside the timing, if not yet;
        then, on that cold connection, waiting ``cold_wait_s`` before the first byte)."""
        done: dict[str, float] = {}
        cold = self._sock is None

        def receive() -> None:
            while self._conn is None:  # the cold case: accepted by connect() below
                time.sleep(0.0005)
            header = self._conn.recv(_HDR.size, socket.MSG_WAITALL)
            (want,) = _HDR.unpack(header)
            buf = bytearray(4 << 20)
            got = 0
            while got < want:
                n = self._conn.recv_into(buf, min(len(buf), want - got))
                if n == 0:
                    break
                got += n
            done["t"] = time.perf_counter()

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        start = time.perf_counter()
        waited = 0.0
        if cold:
            self.connect()
            if cold_wait_s > 0:
                waited = cold_wait_s
                time.sleep(cold_wait_s)  # the compensation itself, inside the timing
        assert self._sock is not None
        self._sock.sendall(_HDR.pack(nbytes))
        left = nbytes
        while left > 0:
            n = min(left, len(_CHUNK))
            self._sock.sendall(_CHUNK[:n])
            left -= n
        thread.join(timeout=120)
        return TransferTime(done["t"] - start, self.connect_s if cold else 0.0, nbytes, waited)

    def warm(self, bdp_bytes: int, idle_s: float = 1.0) -> None:
        """Open the window as a long-lived peer connection has it, then go idle."""
        if self._sock is None:
            self.connect()
        self.send(max(WARM_BDPS * bdp_bytes, 1 << 20))
        time.sleep(idle_s)

    def close(self) -> None:
        for s in (self._sock, self._conn, self._lsock):
            if s is not None:
                s.close()


SO_MAX_PACING_RATE = 47


class CrossFlow:
    """A competing bulk flow from ``src`` to ``dst`` during [t0 + start, t0 + start + duration]
    (monotonic), paced at ``rate_bps`` bytes/s if given (TCP's internal pacing: no fq needed).
    ``run`` blocks; the result is the bytes delivered and the seconds it ran."""

    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        congestion: str,
        *,
        start: float,
        duration_s: float,
        rate_bps: int | None,
    ) -> None:
        self.pair = Pair(src, dst, congestion)
        self.start, self.duration_s, self.rate_bps = start, duration_s, rate_bps
        self.delivered = 0
        self.seconds = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.stopped.wait(max(0.0, self.start - time.monotonic())):
            return
        pair = self.pair
        pair.connect()
        assert pair._sock is not None and pair._conn is not None
        if self.rate_bps:
            pair._sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, self.rate_bps)
        got = [0]

        def drain() -> None:
            assert pair._conn is not None
            buf = bytearray(1 << 20)
            while True:
                n = pair._conn.recv_into(buf)
                if n == 0:
                    return
                got[0] += n

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        t0 = time.perf_counter()
        deadline = time.monotonic() + self.duration_s
        pair._sock.settimeout(1.0)
        while time.monotonic() < deadline and not self.stopped.is_set():
            try:
                pair._sock.send(_CHUNK[: 1 << 20])
            except TimeoutError:
                continue
        pair._sock.shutdown(socket.SHUT_WR)
        reader.join(timeout=30)
        self.seconds = time.perf_counter() - t0
        self.delivered = got[0]
        pair.close()

    @property
    def mbit(self) -> float:
        return self.delivered * 8 / max(self.seconds, 1e-9) / 1e6
