"""The KV connector's wire format: frames, message kinds and block keys (stdlib only).

A frame is ``magic kind header_len payload_len`` (``!4sBIQ``), a JSON header and a binary
payload. Every length is checked against a limit before anything is read, and a header
that is not a JSON object, a kind that is unknown or a payload shorter than announced is
refused with :class:`WireError`: a malformed or truncated KV message is never loaded.

Block keys chain the prompt's token ids block by block (``key[i] = H(key[i-1] ||
tokens of block i)``), so a key names a block *and* everything before it, as a prefix
cache does; the last, partial block of a prompt is kept under its parent's key with its
own token ids. Must not import torch, vLLM or anything of the harness.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from array import array
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

MAGIC = b"PKV1"
FRAME = struct.Struct("!4sBIQ")
MAX_HEADER = 1 << 20  # 1 MiB of JSON
MAX_PAYLOAD = 1 << 34  # 16 GiB: far above one request's KV at any size we run
ROOT_KEY = b"\x00" * 16


class Kind(IntEnum):
    OFFER = 1  # sender -> receiver: a transfer's prompt tokens (payload: int32 ids)
    HAVE = 2  # receiver -> sender: how many leading full blocks it already holds
    DATA = 3  # sender -> receiver: the blocks it lacks (payload: block bytes)
    DONE = 4  # receiver -> sender: stored (bytes, timings)
    LOOKUP = 5  # scheduler -> its own node: how many prompt tokens are loadable now
    FOUND = 6  # node -> scheduler
    WAIT = 7  # router -> node: block until a transfer ends (or a timeout)
    STATUS = 8  # node -> router: the transfer's state and timings
    STATS = 9  # anyone -> node: byte and transfer counters
    COUNTERS = 10  # node -> asker
    ERROR = 11  # either way: refused, with a reason


class WireError(Exception):
    """A frame that is malformed, truncated, too large or of an unexpected kind."""


class PeerClosed(WireError):
    """The peer closed the connection between frames (not inside one): an orderly end."""


@dataclass(frozen=True)
class Frame:
    kind: Kind
    header: dict[str, Any]
    payload: bytes | bytearray = b""
    size: int = 0  # the whole frame on the wire (prefix, header, payload)


def encode(kind: Kind, header: dict[str, Any], payload: bytes | memoryview = b"") -> bytes:
    """The bytes of one frame (the payload is copied: use :func:`send` for large ones)."""
    head = json.dumps(header, separators=(",", ":")).encode()
    if len(head) > MAX_HEADER:
        raise WireError(f"header of {len(head)} bytes is over the {MAX_HEADER}-byte limit")
    return FRAME.pack(MAGIC, int(kind), len(head), len(payload)) + head + bytes(payload)


def send(sock: socket.socket, kind: Kind, header: dict[str, Any], payload: Any = b"") -> int:
    """Write one frame; the payload (bytes-like) is sent without a copy. Returns bytes sent."""
    return send_parts(sock, kind, header, [payload] if payload else [])


def send_parts(sock: socket.socket, kind: Kind, header: dict[str, Any], parts: list[Any]) -> int:
    """One frame whose payload is ``parts`` back to back (no joined copy). Bytes sent."""
    views = [memoryview(p).cast("B") for p in parts]
    size = sum(len(v) for v in views)
    head = json.dumps(header, separators=(",", ":")).encode()
    if len(head) > MAX_HEADER:
        raise WireError(f"header of {len(head)} bytes is over the {MAX_HEADER}-byte limit")
    sock.sendall(FRAME.pack(MAGIC, int(kind), len(head), size) + head)
    for v in views:
        sock.sendall(v)
    return FRAME.size + len(head) + size


def parse_prefix(prefix: bytes) -> tuple[Kind, int, int]:
    """(kind, header length, payload length) of a frame's fixed prefix, checked."""
    if len(prefix) != FRAME.size:
        raise WireError(f"truncated frame: {len(prefix)} of {FRAME.size} prefix bytes")
    magic, kind, head_len, payload_len = FRAME.unpack(prefix)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r}: not a pddbench KV frame")
    try:
        k = Kind(kind)
    except ValueError:
        raise WireError(f"unknown message kind {kind}") from None
    if head_len > MAX_HEADER:
        raise WireError(f"header of {head_len} bytes is over the {MAX_HEADER}-byte limit")
    if payload_len > MAX_PAYLOAD:
        raise WireError(f"payload of {payload_len} bytes is over the limit")
    return k, head_len, payload_len


def parse_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise WireError("header is not JSON") from None
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    return header


def decode(data: bytes) -> Frame:
    """One whole frame from ``data`` (exactly one; trailing bytes are refused)."""
    kind, head_len, payload_len = parse_prefix(data[: FRAME.size])
    end = FRAME.size + head_len + payload_len
    if len(data) < end:
        raise WireError(f"truncated frame: {len(data)} of {end} bytes")
    if len(data) > end:
        raise WireError(f"{len(data) - end} bytes after the frame")
    header = parse_header(data[FRAME.size : FRAME.size + head_len])
    return Frame(kind, header, data[FRAME.size + head_len : end], end)


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    """Exactly ``n`` bytes, or :class:`WireError` when the peer closes first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if k == 0:
            raise WireError(f"truncated: connection closed after {got} of {n} bytes")
        got += k
    return buf


def recv(sock: socket.socket, expect: tuple[Kind, ...] | None = None) -> Frame:
    """Read one frame; ``expect``: the kinds allowed here (an ERROR frame raises its reason)."""
    first = sock.recv(1)
    if not first:
        raise PeerClosed("the peer closed the connection")
    prefix = first + bytes(recv_exact(sock, FRAME.size - 1))
    kind, head_len, payload_len = parse_prefix(prefix)
    header = parse_header(bytes(recv_exact(sock, head_len)))
    payload = recv_exact(sock, payload_len) if payload_len else bytearray()
    if kind is Kind.ERROR and (expect is None or Kind.ERROR not in expect):
        raise WireError(f"peer refused: {header.get('reason', '?')}")
    if expect is not None and kind not in expect:
        raise WireError(f"expected {'/'.join(k.name for k in expect)}, got {kind.name}")
    return Frame(kind, header, payload, FRAME.size + head_len + payload_len)


def tokens_bytes(tokens: list[int] | tuple[int, ...]) -> bytes:
    return array("i", tokens).tobytes()


def tokens_of(payload: bytes) -> list[int]:
    if len(payload) % 4:
        raise WireError(f"token payload of {len(payload)} bytes is not int32 ids")
    ids = array("i")
    ids.frombytes(payload)
    return ids.tolist()


def block_keys(tokens: list[int], block: int) -> list[bytes]:
    """The chained key of every full block of ``tokens``."""
    keys: list[bytes] = []
    parent = ROOT_KEY
    for start in range(0, len(tokens) - block + 1, block):
        h = hashlib.blake2b(parent, digest_size=16)
        h.update(array("i", tokens[start : start + block]).tobytes())
        parent = h.digest()
        keys.append(parent)
    return keys


@dataclass(frozen=True)
class Geometry:
    """One block's KV on the wire: ``layers`` × the cache's per-block ``shape`` of
    ``dtype`` (the engine's own layout inside a block: whatever it is, sender and receiver
    must agree, and they check that they do)."""

    layers: int
    block: int  # tokens per block
    shape: tuple[int, ...]  # one layer's block, as the cache holds it
    dtype: str  # torch's name: "bfloat16", "float32", ...
    itemsize: int

    @property
    def block_bytes(self) -> int:
        n = self.layers * self.itemsize
        for d in self.shape:
            n *= d
        return n

    @property
    def token_bytes(self) -> int:
        return self.block_bytes // self.block

    def to_json(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "block": self.block,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "itemsize": self.itemsize,
        }

    @classmethod
    def from_json(cls, data: object) -> Geometry:
        if not isinstance(data, dict):
            raise WireError("geometry is not an object")
        try:
            shape = data["shape"]
            g = cls(
                layers=data["layers"],
                block=data["block"],
                shape=tuple(shape) if isinstance(shape, list) else (),
                dtype=data["dtype"],
                itemsize=data["itemsize"],
            )
        except (KeyError, TypeError):
            raise WireError(f"bad geometry {data!r}") from None
        ints = (g.layers, g.block, g.itemsize, *g.shape)
        ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in ints)
        if not ok or not g.shape or not isinstance(g.dtype, str):
            raise WireError(f"bad geometry {data!r}")
        return g
