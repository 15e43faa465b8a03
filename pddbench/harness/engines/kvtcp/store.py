"""The receiving side's KV: blocks by chained key, partial tails, transfers, pins.

Owns what a node holds and what a request may load from it. Full blocks sit in an LRU by
key up to a byte capacity; a prompt's partial last block sits under its parent's key with
its own token ids, so a later request that extends that prompt (Extend-Decode: the prompt
plus the relay's tokens) matches it token by token. A lookup *pins* what it matched for
the request until the loader takes it, so an eviction between the scheduler's answer and
the worker's load cannot change what is loaded. Thread-safe (the node's connection
threads write, the loader and lookups read); no sockets, no torch.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

from pddbench.harness.engines.kvtcp.wire import ROOT_KEY, Geometry, block_keys

Block = bytes | bytearray | memoryview  # one block's KV (a view into a received payload)
PINS_KEPT_S = 120.0  # a pin nobody took (a request aborted before its load) is dropped
TRANSFERS_KEPT = 4096  # finished transfers remembered for WAIT and LOOKUP


@dataclass(frozen=True)
class Transfer:
    """One incoming transfer as the receiver saw it (monotonic seconds of this host)."""

    transfer: str
    state: str  # "receiving" | "done" | "failed"
    started: float
    ended: float | None = None
    payload_bytes: int = 0  # KV bytes that crossed (blocks the receiver lacked)
    wire_bytes: int = 0  # every byte the sender sent for it (OFFER and DATA frames)
    blocks: int = 0  # blocks received (the tail counted)
    skipped: int = 0  # leading full blocks the receiver already held (not sent)
    tokens: int = 0  # prompt tokens the transfer covers
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class Pinned:
    """What one request may load: block index -> bytes, and how many tokens in all."""

    tokens: int
    blocks: dict[int, Block]


class BlockStore:
    def __init__(self, capacity_bytes: int) -> None:
        self.geometry: Geometry | None = None
        self.capacity_bytes = capacity_bytes
        self._full: OrderedDict[bytes, Block] = OrderedDict()
        self._tails: dict[bytes, list[tuple[tuple[int, ...], Block]]] = {}
        self._bytes = 0
        self._transfers: OrderedDict[str, Transfer] = OrderedDict()
        self._pins: dict[str, tuple[float, Pinned]] = {}
        self._cond = threading.Condition()

    # -- the sender's side of a transfer ------------------------------------------
    def leading(self, keys: list[bytes]) -> int:
        """How many of ``keys``, from the first, this store holds (they become recent)."""
        with self._cond:
            n = 0
            for key in keys:
                if key not in self._full:
                    break
                self._full.move_to_end(key)
                n += 1
            return n

    def begin(self, transfer: str, tokens: int, now: float | None = None) -> None:
        with self._cond:
            t = now if now is not None else time.monotonic()
            self._transfers[transfer] = Transfer(transfer, "receiving", t, tokens=tokens)
            self._transfers.move_to_end(transfer)
            while len(self._transfers) > TRANSFERS_KEPT:
                self._transfers.popitem(last=False)
            self._cond.notify_all()

    def put(
        self,
        keys: list[bytes],
        blocks: list[Block],
        tail: tuple[bytes, tuple[int, ...], Block] | None,
    ) -> None:
        """Full blocks by key, and a partial tail (parent key, its token ids, bytes)."""
        with self._cond:
            for key, data in zip(keys, blocks, strict=True):
                if key not in self._full:
                    self._bytes += len(data)
                self._full[key] = data
                self._full.move_to_end(key)
            if tail is not None:
                parent, ids, data = tail
                kept = [(t, d) for t, d in self._tails.get(parent, []) if t != ids]
                self._tails[parent] = [*kept[-3:], (ids, data)]
            self._evict()

    def _evict(self) -> None:
        while self._bytes > self.capacity_bytes and self._full:
            key, data = self._full.popitem(last=False)
            self._bytes -= len(data)
            self._tails.pop(key, None)

    def finish(self, transfer: str, **fields: object) -> Transfer:
        return self._end(transfer, "done", None, fields)

    def fail(self, transfer: str, reason: str, **fields: object) -> Transfer:
        return self._end(transfer, "failed", reason, fields)

    def _end(self, transfer: str, state: str, reason: str | None, fields: dict) -> Transfer:
        with self._cond:
            now = time.monotonic()
            old = self._transfers.get(transfer) or Transfer(transfer, state, now)
            new = replace(old, state=state, ended=now, reason=reason, **fields)
            self._transfers[transfer] = new
            self._cond.notify_all()
            return new

    # -- the receiving engine's side ---------------------------------------------------
    def transfer(self, transfer: str) -> Transfer | None:
        with self._cond:
            return self._transfers.get(transfer)

    def wait(self, transfer: str, timeout_s: float) -> Transfer | None:
        """The transfer once it has ended (or as it is at the timeout; None: never seen)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                t = self._transfers.get(transfer)
                if t is not None and t.state != "receiving":
                    return t
                left = deadline - time.monotonic()
                if left <= 0:
                    return t
                self._cond.wait(left)

    def lookup(self, request: str, tokens: list[int], limit: int, block: int) -> int:
        """How many of ``tokens`` (at most ``limit``) the store can supply from position 0;
        what it matched is pinned for ``request`` until :meth:`take`."""
        keys = block_keys(tokens, block)
        with self._cond:
            self._drop_stale_pins()
            found: dict[int, Block] = {}
            for i, key in enumerate(keys):
                data = self._full.get(key)
                if data is None or i * block >= limit:
                    break
                found[i] = data
            n = len(found) * block
            if n < limit:
                parent = keys[len(found) - 1] if found else ROOT_KEY
                rest = tokens[n:]
                best: tuple[tuple[int, ...], Block] | None = None
                for ids, data in self._tails.get(parent, []):
                    fits = len(ids) <= len(rest) and tuple(rest[: len(ids)]) == ids
                    if fits and (best is None or len(ids) > len(best[0])):
                        best = (ids, data)
                if best is not None:
                    found[len(found)] = best[1]
                    n += len(best[0])
            n = min(n, limit)
            if n > 0:
                self._pins[request] = (time.monotonic(), Pinned(n, found))
            else:
                self._pins.pop(request, None)
            return n

    def take(self, request: str) -> Pinned | None:
        with self._cond:
            entry = self._pins.pop(request, None)
            return entry[1] if entry else None

    def _drop_stale_pins(self) -> None:
        cut = time.monotonic() - PINS_KEPT_S
        for request in [r for r, (t, _) in self._pins.items() if t < cut]:
            del self._pins[request]

    @property
    def receiving(self) -> int:
        """Transfers whose bytes are arriving now."""
        with self._cond:
            return sum(1 for t in self._transfers.values() if t.state == "receiving")

    @property
    def held_bytes(self) -> int:
        with self._cond:
            return self._bytes
