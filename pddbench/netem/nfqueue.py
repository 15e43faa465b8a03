"""The nfnetlink_queue protocol, spoken over a raw NETLINK_NETFILTER socket.

This module owns the wire format (config, packet and verdict messages) and a thin socket
wrapper; the delay daemon decides *when* to release packets. Only packet ids cross the
socket: the queue is bound in META copy mode (no payload) with GSO super-packets queued
whole, and packets are released with batched verdicts (one message accepts every queued
packet with an id up to N). It must not hold packets itself or relay their bytes.

Message layout: ``nlmsghdr`` (16 B) + ``nfgenmsg`` (family, version, res_id=queue number
big-endian) + netlink attributes (4 B header, 4-byte aligned). Multi-byte attribute
payloads are big-endian, as in ``linux/netfilter/nfnetlink_queue.h``.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_CFG_F_GSO = 4

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2

NF_DROP = 0
NF_ACCEPT = 1

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5

_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("=BBH")  # res_id is packed big-endian by hand
_NLATTR = struct.Struct("=HH")
_HDR_LEN = _NLMSGHDR.size + _NFGENMSG.size  # 20


def _attr(kind: int, payload: bytes) -> bytes:
    length = _NLATTR.size + len(payload)
    pad = (-length) & 3
    return _NLATTR.pack(length, kind) + payload + b"\0" * pad


def _message(msg_type: int, queue: int, attrs: bytes, *, flags: int, seq: int) -> bytes:
    body = _NFGENMSG.pack(socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    header = _NLMSGHDR.pack(
        _NLMSGHDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq, 0
    )
    return header + body


def config_bind(queue: int, *, maxlen: int, seq: int = 1, fail_open: bool = False) -> bytes:
    """Bind ``queue`` in META copy mode with GSO packets queued whole; asks for an ACK."""
    flags = NFQA_CFG_F_GSO | (NFQA_CFG_F_FAIL_OPEN if fail_open else 0)
    mask = NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN
    attrs = (
        _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET))
        + _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
        + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))
        + _attr(NFQA_CFG_MASK, struct.pack("!I", mask))
        + _attr(NFQA_CFG_FLAGS, struct.pack("!I", flags))
    )
    return _message(NFQNL_MSG_CONFIG, queue, attrs, flags=NLM_F_REQUEST | NLM_F_ACK, seq=seq)


def config_unbind(queue: int, seq: int = 2) -> bytes:
    attrs = _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, socket.AF_INET))
    return _message(NFQNL_MSG_CONFIG, queue, attrs, flags=NLM_F_REQUEST | NLM_F_ACK, seq=seq)


def verdict(queue: int, packet_id: int, accept: bool, *, batch: bool) -> bytes:
    """A verdict for one packet, or (``batch``) for every queued packet with id ≤ ``packet_id``."""
    attrs = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT if accept else NF_DROP, packet_id))
    msg_type = NFQNL_MSG_VERDICT_BATCH if batch else NFQNL_MSG_VERDICT
    return _message(msg_type, queue, attrs, flags=NLM_F_REQUEST, seq=0)


def parse_packets(buf: bytes | memoryview, size: int) -> Iterator[int]:
    """Yield the packet id of each queued-packet message in ``buf[:size]``.

    Raises OSError for a netlink error message (other than a plain ACK).
    """
    offset = 0
    while offset + _NLMSGHDR.size <= size:
        length, msg_type, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, offset)
        if length < _NLMSGHDR.size:
            return
        if msg_type == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", buf, offset + _NLMSGHDR.size)
            if code != 0:
                raise OSError(-code, f"nfnetlink_queue: {os.strerror(-code)}")
        elif msg_type == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            packet_id = -1
            pos = offset + _HDR_LEN
            end = offset + length
            while pos + _NLATTR.size <= end:
                alen, akind = _NLATTR.unpack_from(buf, pos)
                if alen < _NLATTR.size:
                    break
                akind &= 0x7FFF
                if akind == NFQA_PACKET_HDR:
                    (packet_id,) = struct.unpack_from("!I", buf, pos + 4)
                    break
                pos += (alen + 3) & ~3
            if packet_id >= 0:
                yield packet_id
        offset += (length + 3) & ~3


class QueueSocket:
    """A bound NFQUEUE: ``recv_packets`` and ``release_upto`` / ``drop``; no payload copies."""

    def __init__(self, queue: int, *, maxlen: int, rcvbuf: int = 32 << 20) -> None:
        self.queue = queue
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        # A full socket buffer must not turn into ENOBUFS: queued packets stay in the kernel
        # and are released by the next batch verdict (ids are cumulative).
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))
        self.sock.send(config_bind(queue, maxlen=maxlen))
        self._await_ack()
        self.sock.setblocking(False)
        self._buf = bytearray(1 << 20)
        self._view = memoryview(self._buf)

    def _await_ack(self) -> None:
        data = self.sock.recv(65536)
        _length, msg_type, *_ = _NLMSGHDR.unpack_from(data, 0)
        if msg_type == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, _NLMSGHDR.size)
            if code != 0:
                raise OSError(-code, f"cannot bind NFQUEUE {self.queue}: {os.strerror(-code)}")

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_packets(self) -> list[int]:
        """The ids of every queued-packet notification available now (non-blocking)."""
        out: list[int] = []
        while True:
            try:
                n = self.sock.recv_into(self._buf)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    continue
                raise
            out.extend(parse_packets(self._view, n))

    def release_upto(self, packet_id: int) -> None:
        self.sock.send(verdict(self.queue, packet_id, True, batch=True))

    def drop(self, packet_id: int) -> None:
        self.sock.send(verdict(self.queue, packet_id, False, batch=False))

    def close(self) -> None:
        self.sock.close()
