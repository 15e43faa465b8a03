"""The NFQUEUE steering rule, installed over netlink as nf_tables messages (no iptables CLI).

This module owns the wire format of one nf_tables transaction: a table ``pddbench``, a
``postrouting`` base chain (type filter, hook POSTROUTING, priority -150, i.e. where
iptables' mangle table sits) and, per shaped interface, one rule ``meta oifname IF`` →
``NFQUEUE --queue-num N``. The queue action is the *xtables* NFQUEUE target run through
nf_tables' compatibility expression (``nft_compat``: expression name ``target``, target
name ``NFQUEUE``, revision 3, payload ``struct xt_NFQ_info_v3``) — exactly what
``iptables-nft -j NFQUEUE`` sends. nft's native ``queue`` expression (``nft_queue``) is
missing on some kernels that still have the xt target (the one NETWORK.md describes), so
the compat target is the more portable route.

``transaction(...)`` builds the bytes (pure, unit-tested); ``install_queue_rules`` sends them
on a NETLINK_NETFILTER socket of the calling thread's namespace and checks every ACK.
Everything goes with the namespace; there is nothing to delete.

Layout reference: ``linux/netfilter/nf_tables.h``, ``linux/netfilter/nfnetlink.h``,
``linux/netfilter/xt_NFQUEUE.h``. Attribute payloads are big-endian except the xt target
info, which is a host-order C struct.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_NEWTABLE = 0
NFT_MSG_NEWCHAIN = 3
NFT_MSG_NEWRULE = 6

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_APPEND = 0x800
NLMSG_ERROR = 0x2
NLA_F_NESTED = 0x8000

NFPROTO_IPV4 = 2
NF_INET_POST_ROUTING = 4
NF_IP_PRI_MANGLE = -150
NF_ACCEPT = 1

NFTA_TABLE_NAME = 1
NFTA_CHAIN_TABLE = 1
NFTA_CHAIN_NAME = 3
NFTA_CHAIN_HOOK = 4
NFTA_CHAIN_POLICY = 5
NFTA_CHAIN_TYPE = 7
NFTA_HOOK_HOOKNUM = 1
NFTA_HOOK_PRIORITY = 2
NFTA_RULE_TABLE = 1
NFTA_RULE_CHAIN = 2
NFTA_RULE_EXPRESSIONS = 4
NFTA_LIST_ELEM = 1
NFTA_EXPR_NAME = 1
NFTA_EXPR_DATA = 2
NFTA_META_DREG = 1
NFTA_META_KEY = 2
NFT_META_OIFNAME = 7
NFTA_CMP_SREG = 1
NFTA_CMP_OP = 2
NFTA_CMP_DATA = 3
NFT_CMP_EQ = 0
NFTA_DATA_VALUE = 1
NFT_REG_1 = 1  # a 16-byte register: holds an interface name
NFTA_TARGET_NAME = 1
NFTA_TARGET_REV = 2
NFTA_TARGET_INFO = 3
IFNAMSIZ = 16
XT_NFQ_REVISION = 3

TABLE = "pddbench"
CHAIN = "postrouting"

_NLMSGHDR = struct.Struct("=IHHII")


@dataclass(frozen=True)
class QueueRule:
    """Send every IPv4 packet leaving ``ifname`` to NFQUEUE ``queue``."""

    ifname: str
    queue: int


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((-length) & 3)


def _nested(kind: int, *attrs: bytes) -> bytes:
    return _attr(kind | NLA_F_NESTED, b"".join(attrs))


def _str(kind: int, text: str) -> bytes:
    return _attr(kind, text.encode() + b"\0")


def _be32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("!i" if value < 0 else "!I", value))


def _message(
    msg_type: int, flags: int, seq: int, body: bytes, *, family: int, res_id: int
) -> bytes:
    payload = struct.pack("=BBH", family, 0, socket.htons(res_id)) + body
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), msg_type, flags, seq, 0) + payload


def _nft(msg: int, flags: int, seq: int, body: bytes) -> bytes:
    kind = (NFNL_SUBSYS_NFTABLES << 8) | msg
    return _message(
        kind, NLM_F_REQUEST | NLM_F_ACK | flags, seq, body, family=NFPROTO_IPV4, res_id=0
    )


def _expr(name: str, *data: bytes) -> bytes:
    return _nested(NFTA_LIST_ELEM, _str(NFTA_EXPR_NAME, name), _nested(NFTA_EXPR_DATA, *data))


def xt_nfq_info(queue: int) -> bytes:
    """``struct xt_NFQ_info_v3 {u16 queuenum, queues_total, flags}``, padded to XT_ALIGN (8)."""
    return struct.pack("=HHH", queue, 1, 0) + b"\0\0"


def rule_expressions(rule: QueueRule) -> bytes:
    """``meta oifname == IF`` then the xt NFQUEUE target (via nft_compat)."""
    name = rule.ifname.encode()
    if len(name) >= IFNAMSIZ:
        raise ValueError(f"interface name {rule.ifname!r} longer than {IFNAMSIZ - 1}")
    return _nested(
        NFTA_RULE_EXPRESSIONS,
        _expr("meta", _be32(NFTA_META_KEY, NFT_META_OIFNAME), _be32(NFTA_META_DREG, NFT_REG_1)),
        _expr(
            "cmp",
            _be32(NFTA_CMP_SREG, NFT_REG_1),
            _be32(NFTA_CMP_OP, NFT_CMP_EQ),
            _nested(NFTA_CMP_DATA, _attr(NFTA_DATA_VALUE, name.ljust(IFNAMSIZ, b"\0"))),
        ),
        _expr(
            "target",
            _str(NFTA_TARGET_NAME, "NFQUEUE"),
            _be32(NFTA_TARGET_REV, XT_NFQ_REVISION),
            _attr(NFTA_TARGET_INFO, xt_nfq_info(rule.queue)),
        ),
    )


def transaction(rules: Sequence[QueueRule], *, seq: int = 1) -> tuple[bytes, int]:
    """One batch creating table, chain and ``rules``; returns (bytes, number of ACKs due)."""
    begin = _message(
        NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, b"", family=0, res_id=NFNL_SUBSYS_NFTABLES
    )
    msgs = [_nft(NFT_MSG_NEWTABLE, NLM_F_CREATE, seq + 1, _str(NFTA_TABLE_NAME, TABLE))]
    hook = _nested(
        NFTA_CHAIN_HOOK,
        _be32(NFTA_HOOK_HOOKNUM, NF_INET_POST_ROUTING),
        _be32(NFTA_HOOK_PRIORITY, NF_IP_PRI_MANGLE),
    )
    chain = (
        _str(NFTA_CHAIN_TABLE, TABLE)
        + _str(NFTA_CHAIN_NAME, CHAIN)
        + hook
        + _be32(NFTA_CHAIN_POLICY, NF_ACCEPT)
        + _str(NFTA_CHAIN_TYPE, "filter")
    )
    msgs.append(_nft(NFT_MSG_NEWCHAIN, NLM_F_CREATE, seq + 2, chain))
    for i, rule in enumerate(rules):
        body = _str(NFTA_RULE_TABLE, TABLE) + _str(NFTA_RULE_CHAIN, CHAIN) + rule_expressions(rule)
        msgs.append(_nft(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, seq + 3 + i, body))
    end_seq = seq + 3 + len(rules)
    end = _message(
        NFNL_MSG_BATCH_END, NLM_F_REQUEST, end_seq, b"", family=0, res_id=NFNL_SUBSYS_NFTABLES
    )
    return begin + b"".join(msgs) + end, len(msgs)


def parse_acks(data: bytes) -> list[tuple[int, int]]:
    """(sequence number, errno) of every NLMSG_ERROR message in ``data`` (errno 0 = ACK)."""
    out = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, msg_type, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            break
        if msg_type == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, offset + _NLMSGHDR.size)
            out.append((seq, -code))
        offset += (length + 3) & ~3
    return out


def install_queue_rules(rules: Sequence[QueueRule], timeout_s: float = 5.0) -> None:
    """Install ``rules`` in the calling thread's namespace; OSError naming the failed step."""
    data, expected = transaction(rules)
    steps = ["table", "chain", *(f"rule {r.ifname}→queue {r.queue}" for r in rules)]
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as sock:
        sock.settimeout(timeout_s)
        sock.bind((0, 0))
        sock.send(data)
        acked = 0
        while acked < expected:
            for seq, err in parse_acks(sock.recv(65536)):
                if err:
                    step = steps[seq - 2] if 0 <= seq - 2 < len(steps) else f"message {seq}"
                    raise OSError(err, f"nf_tables {step}: {os.strerror(err)}")
                acked += 1
