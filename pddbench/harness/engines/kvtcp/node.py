"""The connector's sockets: the listener beside an engine's KV cache, and the pusher.

Owns the TCP side of the KV connector. Every instance runs one :class:`KvNode` on its
``listen`` address (inside its namespace, or loopback): it receives pushed blocks into its
:class:`BlockStore` (OFFER → HAVE → DATA → DONE: only the blocks the receiver lacks
cross), answers its own scheduler's LOOKUP, a router's WAIT and anyone's STATS. The
:class:`Pusher` sends a finished prefill's blocks to each destination over a pool of
persistent connections per peer (opened at start for the ``peers`` named in the
configuration: a transfer engine keeps its connections warm), marked with the bulk DSCP
so the emulated WAN's bulk class carries them. A malformed or truncated message fails its
transfer and closes the connection; nothing of it is stored. No torch, no vLLM.
"""

from __future__ import annotations

import logging
import queue
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pddbench.harness.engines.kvtcp.store import BlockStore
from pddbench.harness.engines.kvtcp.wire import (
    Frame,
    Geometry,
    Kind,
    PeerClosed,
    WireError,
    block_keys,
    recv,
    send,
    send_parts,
    tokens_bytes,
    tokens_of,
)
from pddbench.netem.qos import BULK_TOS

log = logging.getLogger("pddbench.kvtcp")
CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 120.0  # one frame's read or write; a stalled peer fails the transfer


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bad address {address!r} (want host:port)")
    return host, int(port)


@dataclass
class Counters:
    """What a node has moved, for ``/metrics``: bytes are whole frames (a transfer's OFFER
    and DATA: framing, the prompt's token ids and the blocks), counted where they were sent
    and where they were received."""

    bytes_sent: int = 0
    bytes_received: int = 0
    transfers_sent: int = 0
    transfers_received: int = 0
    transfers_failed: int = 0
    send_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **delta: float) -> None:
        with self.lock:
            for k, v in delta.items():
                setattr(self, k, getattr(self, k) + v)

    def to_json(self) -> dict[str, float]:
        with self.lock:
            return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "lock"}


class KvNode:
    """One instance's listener and pusher around its store."""

    def __init__(
        self,
        listen: str,
        store: BlockStore,
        *,
        peers: Sequence[str] = (),
        streams: int = 2,
        tos: int = BULK_TOS,
    ) -> None:
        self.listen = listen
        self.store = store
        self.counters = Counters()
        self.pusher = Pusher(self.counters, streams=streams, tos=tos)
        self._server: socketserver.ThreadingTCPServer | None = None
        self._peers = list(peers)

    def start(self) -> None:
        host, port = split_address(self.listen)
        node = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                node._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, port), Handler)
        threading.Thread(target=self._server.serve_forever, name="kv-listen", daemon=True).start()
        for peer in self._peers:
            self.pusher.warm(peer)
        log.info("pddbench KV node listening on %s (peers: %s)", self.listen, self._peers)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.pusher.stop()

    # -- one connection ----------------------------------------------------------------
    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(IO_TIMEOUT_S)
        try:
            while True:
                try:
                    frame = recv(sock)
                except PeerClosed:
                    return
                except WireError as exc:
                    log.warning("KV connection refused: %s", exc)
                    return
                if frame.kind is Kind.OFFER:
                    if not self._receive(sock, frame):
                        return
                elif frame.kind is Kind.LOOKUP:
                    self._lookup(sock, frame.header, frame.payload)
                elif frame.kind is Kind.WAIT:
                    timeout = _number(frame.header.get("timeout_s"), 30.0)
                    t = self.store.wait(str(frame.header.get("transfer")), min(timeout, 600.0))
                    send(sock, Kind.STATUS, t.to_json() if t else {"state": "unknown"})
                elif frame.kind is Kind.STATS:
                    payload = {
                        **self.counters.to_json(),
                        "held_bytes": self.store.held_bytes,
                        "receiving": self.store.receiving,
                    }
                    send(sock, Kind.COUNTERS, payload)
                else:
                    send(sock, Kind.ERROR, {"reason": f"unexpected {frame.kind.name}"})
                    return
        except OSError:
            return
        finally:
            sock.close()

    def _receive(self, sock: socket.socket, frame: Frame) -> bool:
        """One pushed transfer; False when the connection must close."""
        offer, payload = frame.header, frame.payload
        transfer = str(offer.get("transfer", ""))
        mine = self.store.geometry
        try:
            geometry = Geometry.from_json(offer.get("geometry"))
            tokens = tokens_of(payload)
            if not transfer:
                raise WireError("offer without a transfer id")
            if mine is None:
                raise WireError("this instance has no KV cache registered yet")
            if geometry != mine:
                raise WireError(f"geometry {geometry} is not this cache's {mine}")
        except WireError as exc:
            send(sock, Kind.ERROR, {"reason": str(exc)})
            if transfer:
                self.store.fail(transfer, str(exc))
            return False
        self.store.begin(transfer, len(tokens))
        keys = block_keys(tokens, geometry.block)
        have = self.store.leading(keys)
        tail_ids = tuple(tokens[len(keys) * geometry.block :])
        send(sock, Kind.HAVE, {"leading": have, "full": len(keys)})
        try:
            data = recv(sock, (Kind.DATA,))
            want_blocks = len(keys) - have + (1 if tail_ids else 0)
            if data.header.get("first") != have or data.header.get("blocks") != want_blocks:
                raise WireError(
                    f"DATA for blocks {data.header.get('first')}+{data.header.get('blocks')}, "
                    f"expected {have}+{want_blocks}"
                )
            size = geometry.block_bytes
            if len(data.payload) != want_blocks * size:
                raise WireError(f"DATA of {len(data.payload)} bytes, expected {want_blocks * size}")
        except (WireError, OSError) as exc:
            self.store.fail(transfer, str(exc))
            self.counters.add(transfers_failed=1)
            log.warning("KV transfer %s refused: %s", transfer, exc)
            return False
        raw = memoryview(data.payload)
        blocks = [raw[i * size : (i + 1) * size] for i in range(want_blocks)]
        full = blocks[: len(keys) - have]
        tail = None
        if tail_ids:
            parent = keys[-1] if keys else b"\x00" * 16
            tail = (parent, tail_ids, blocks[-1])
        self.store.put(keys[have:], full, tail)
        wire = frame.size + data.size  # every byte the sender sent for it, framing included
        t = self.store.finish(
            transfer,
            payload_bytes=len(raw),
            wire_bytes=wire,
            blocks=want_blocks,
            skipped=have,
        )
        self.counters.add(bytes_received=wire, transfers_received=1)
        send(sock, Kind.DONE, t.to_json())
        return True

    def _lookup(self, sock: socket.socket, header: dict, payload: bytes) -> None:
        geometry = self.store.geometry
        request = str(header.get("request", ""))
        transfer = header.get("transfer")
        limit = int(_number(header.get("limit"), 0))
        if geometry is None:
            send(sock, Kind.FOUND, {"tokens": 0, "state": "unknown"})
            return
        n = self.store.lookup(request, tokens_of(payload), limit, geometry.block)
        t = self.store.transfer(str(transfer)) if transfer else None
        send(sock, Kind.FOUND, {"tokens": n, "state": t.state if t else "unknown"})


def _number(value: object, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value)


@dataclass
class PushJob:
    transfer: str
    tokens: list[int]
    geometry: Geometry
    blocks: list[memoryview]  # one per block of the prompt, the partial tail last
    done: Callable[[dict], None] | None = None


class Pusher:
    """Per destination, ``streams`` threads each holding one persistent connection."""

    def __init__(self, counters: Counters, *, streams: int, tos: int) -> None:
        self.counters = counters
        self.streams = max(1, streams)
        self.tos = tos
        self._queues: dict[str, queue.Queue[PushJob | None]] = {}
        self._lock = threading.Lock()

    def warm(self, peer: str) -> None:
        self._queue(peer)

    def push(self, dest: str, job: PushJob) -> None:
        self._queue(dest).put(job)

    def stop(self) -> None:
        with self._lock:
            for q in self._queues.values():
                for _ in range(self.streams):
                    q.put(None)

    def _queue(self, dest: str) -> queue.Queue[PushJob | None]:
        with self._lock:
            q = self._queues.get(dest)
            if q is None:
                q = self._queues[dest] = queue.Queue()
                for i in range(self.streams):
                    threading.Thread(
                        target=self._worker, args=(dest, q), name=f"kv-push-{dest}-{i}", daemon=True
                    ).start()
            return q

    def _connect(self, dest: str, patient: bool) -> socket.socket | None:
        host, port = split_address(dest)
        deadline = time.monotonic() + (60.0 if patient else 0.0)
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            except OSError:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.5)
                continue
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(IO_TIMEOUT_S)
            return sock

    def _worker(self, dest: str, q: queue.Queue[PushJob | None]) -> None:
        sock = self._connect(dest, patient=True)  # warm: the peer may still be starting
        while True:
            job = q.get()
            if job is None:
                break
            if sock is None:
                sock = self._connect(dest, patient=False)
            result: dict
            if sock is None:
                result = {"state": "failed", "reason": f"cannot connect to {dest}"}
            else:
                try:
                    result = self._send(sock, job)
                except (OSError, WireError) as exc:
                    result = {"state": "failed", "reason": f"{dest}: {exc}"}
                    sock.close()
                    sock = None
            if result.get("state") != "done":
                self.counters.add(transfers_failed=1)
                log.warning("KV push %s to %s failed: %s", job.transfer, dest, result.get("reason"))
            if job.done is not None:
                job.done(result)
        if sock is not None:
            sock.close()

    def _send(self, sock: socket.socket, job: PushJob) -> dict:
        t0 = time.monotonic()
        ids = tokens_bytes(job.tokens)
        offer = {"transfer": job.transfer, "geometry": job.geometry.to_json()}
        sent = send(sock, Kind.OFFER, offer, ids)
        have = recv(sock, (Kind.HAVE,)).header
        first = int(have.get("leading", 0))
        rest = job.blocks[first:]
        header = {"transfer": job.transfer, "first": first, "blocks": len(rest)}
        sent += send_parts(sock, Kind.DATA, header, rest)
        done = recv(sock, (Kind.DONE, Kind.ERROR))
        if done.kind is Kind.ERROR:
            return {"state": "failed", "reason": str(done.header.get("reason"))}
        self.counters.add(bytes_sent=sent, transfers_sent=1, send_seconds=time.monotonic() - t0)
        return {**done.header, "sender_start": t0, "sender_end": time.monotonic()}


def ask(address: str, kind: Kind, header: dict, payload: bytes = b"", timeout_s: float = 10.0):
    """One request/answer with a node on a fresh connection (routers, tests)."""
    host, port = split_address(address)
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S) as sock:
        sock.settimeout(timeout_s)
        send(sock, kind, header, payload)
        return recv(sock)
