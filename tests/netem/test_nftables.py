"""The NFQUEUE steering rule as nf_tables netlink messages (decoded with pyroute2's parser)."""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink.nfnetlink.nftsocket import nft_rule_msg

from pddbench.netem.nftables import (
    NFNL_MSG_BATCH_BEGIN,
    NFNL_MSG_BATCH_END,
    NFNL_SUBSYS_NFTABLES,
    NFT_MSG_NEWRULE,
    QueueRule,
    parse_acks,
    transaction,
    xt_nfq_info,
)


def split(data: bytes) -> list[tuple[int, bytes]]:
    out, offset = [], 0
    while offset < len(data):
        length, msg_type = struct.unpack_from("=IH", data, offset)
        out.append((msg_type, data[offset : offset + length]))
        offset += length
    return out


def test_a_batch_creates_table_chain_and_one_rule_per_interface() -> None:
    data, acks = transaction([QueueRule("pddbx1w0a", 3), QueueRule("pddbx1w1a", 4)])
    types = [t for t, _ in split(data)]
    assert types[0] == NFNL_MSG_BATCH_BEGIN and types[-1] == NFNL_MSG_BATCH_END
    assert acks == len(types) - 2 == 4  # table, chain, two rules


def test_the_rule_matches_the_interface_and_queues_with_the_xt_target() -> None:
    data, _ = transaction([QueueRule("pddbx1w0a", 7)])
    rule = next(m for t, m in split(data) if t == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE)
    msg = nft_rule_msg(rule)
    msg.decode()
    assert msg.get_attr("NFTA_RULE_TABLE") == "pddbench"
    exprs = msg.get_attr("NFTA_RULE_EXPRESSIONS")
    names = [e.get_attr("NFTA_EXPR_NAME") for e in exprs]
    assert names == ["meta", "cmp", "target"]
    target = exprs[2].get_attr("NFTA_EXPR_DATA")
    assert target.get_attr("NFTA_TARGET_NAME") == "NFQUEUE"
    assert target.get_attr("NFTA_TARGET_REV") == 3
    cmp_data = exprs[1].get_attr("NFTA_EXPR_DATA").get_attr("NFTA_CMP_DATA")
    assert cmp_data.get_attr("NFTA_DATA_VALUE") == b"pddbx1w0a".ljust(16, b"\0")


def test_target_info_is_the_v3_struct_padded_to_eight_bytes() -> None:
    info = xt_nfq_info(513)
    assert len(info) == 8 and struct.unpack("=HHH", info[:6]) == (513, 1, 0)


def test_acks_and_errors_are_read_with_their_sequence_numbers() -> None:
    ack = struct.pack("=IHHII", 36, 2, 0, 5, 0) + struct.pack("=i", 0) + b"\0" * 16
    err = struct.pack("=IHHII", 36, 2, 0, 6, 0) + struct.pack("=i", -2) + b"\0" * 16
    assert parse_acks(ack + err) == [(5, 0), (6, 2)]


def test_an_interface_name_must_fit_ifnamsiz() -> None:
    with pytest.raises(ValueError, match="longer than 15"):
        transaction([QueueRule("x" * 16, 1)])
