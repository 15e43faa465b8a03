"""The KV connector's wire format, store and node, over real loopback sockets (no engine).

What a PD engineer relies on: only blocks the receiver lacks cross; a malformed or
truncated message is refused and nothing of it is stored; a lookup supplies a prefix that
need not be block-aligned (Extend-Decode); WAIT reports the receiver's own timings.
"""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.harness.engines.kvtcp.node import Counters, KvNode, Pusher, PushJob, ask
from pddbench.harness.engines.kvtcp.store import BlockStore
from pddbench.harness.engines.kvtcp.wire import (
    FRAME,
    MAGIC,
    Geometry,
    Kind,
    WireError,
    block_keys,
    decode,
    encode,
    send,
    tokens_bytes,
)

G = Geometry(layers=2, block=4, shape=(2, 4, 8), dtype="float32", itemsize=4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def blocks_of(tokens: list[int], g: Geometry = G) -> list[memoryview]:
    """One payload per block whose bytes name the block's first token (checkable)."""
    n = -(-len(tokens) // g.block)
    return [memoryview(bytes([i % 251]) * g.block_bytes) for i in range(n)]


@pytest.fixture
def node():
    store = BlockStore(1 << 24)
    store.geometry = G
    n = KvNode(f"127.0.0.1:{free_port()}", store)
    n.start()
    yield n
    n.stop()


def push(dest: str, tokens: list[int], transfer: str, g: Geometry = G) -> dict:
    counters = Counters()
    pusher = Pusher(counters, streams=1, tos=0)
    got: dict = {}
    done = threading.Event()

    def finished(result: dict) -> None:
        got.update(result)
        done.set()

    pusher.push(dest, PushJob(transfer, tokens, g, blocks_of(tokens, g), finished))
    assert done.wait(20)
    pusher.stop()
    return got


def test_only_missing_blocks_cross_and_wait_reports_the_receivers_timings(node):
    prompt = list(range(1, 11))  # 2 full blocks + a tail of 2
    first = push(node.listen, prompt, "t1")
    assert first["state"] == "done" and first["blocks"] == 3 and first["skipped"] == 0
    assert first["payload_bytes"] == 3 * G.block_bytes
    longer = prompt + list(range(100, 106))  # 4 full blocks: the first 2 already held
    second = push(node.listen, longer, "t2")
    assert second["skipped"] == 2 and second["blocks"] == 2
    assert second["payload_bytes"] == 2 * G.block_bytes
    status = ask(node.listen, Kind.WAIT, {"transfer": "t2", "timeout_s": 1}).header
    assert status["state"] == "done" and status["ended"] >= status["started"]
    stats = ask(node.listen, Kind.STATS, {}).header
    assert stats["transfers_received"] == 2
    assert stats["bytes_received"] >= 5 * G.block_bytes


def test_lookup_matches_a_partial_tail_for_extend_decode(node):
    prompt = list(range(1, 11))
    push(node.listen, prompt, "t1")
    extended = [*prompt, 77, 78, 79]  # the relay's 3 tokens after the prompt
    found = ask(
        node.listen,
        Kind.LOOKUP,
        {"request": "r1", "transfer": "t1", "limit": len(extended) - 1},
        tokens_bytes(extended),
    ).header
    assert found == {"tokens": 10, "state": "done"}  # the whole prompt: not block-aligned
    pinned = node.store.take("r1")
    assert pinned is not None and sorted(pinned.blocks) == [0, 1, 2]
    assert bytes(pinned.blocks[2][:1]) == bytes([2])  # the tail block's own bytes
    # a prompt that diverges inside the tail matches only the full blocks
    other = [*prompt[:9], 5]
    n = node.store.lookup("r2", other, len(other) - 1, G.block)
    assert n == 8


def test_lookup_of_an_unknown_transfer_says_so(node):
    found = ask(
        node.listen, Kind.LOOKUP, {"request": "r", "transfer": "nope", "limit": 3},
        tokens_bytes([1, 2, 3, 4]),
    ).header
    assert found == {"tokens": 0, "state": "unknown"}


def test_a_geometry_mismatch_is_refused_and_nothing_is_stored(node):
    other = Geometry(layers=3, block=4, shape=(2, 4, 8), dtype="float32", itemsize=4)
    result = push(node.listen, list(range(1, 9)), "bad", other)
    assert result["state"] == "failed" and "geometry" in result["reason"]
    assert node.store.held_bytes == 0
    assert node.store.transfer("bad").state == "failed"


def test_a_truncated_transfer_fails_and_stores_nothing(node):
    host, port = node.listen.split(":")
    tokens = list(range(1, 9))
    with socket.create_connection((host, int(port))) as sock:
        send(sock, Kind.OFFER, {"transfer": "cut", "geometry": G.to_json()}, tokens_bytes(tokens))
        head = encode(Kind.DATA, {"transfer": "cut", "first": 0, "blocks": 2}, b"")
        # announce two blocks, send half of one, then hang up
        prefix = FRAME.pack(MAGIC, int(Kind.DATA), len(head) - FRAME.size, 2 * G.block_bytes)
        sock.recv(4096)  # HAVE
        sock.sendall(prefix + head[FRAME.size :] + b"x" * (G.block_bytes // 2))
    status = ask(node.listen, Kind.WAIT, {"transfer": "cut", "timeout_s": 5}).header
    assert status["state"] == "failed" and "truncated" in status["reason"]
    assert node.store.held_bytes == 0
    assert node.store.lookup("r", tokens, 7, G.block) == 0


def test_data_of_the_wrong_size_is_refused(node):
    host, port = node.listen.split(":")
    tokens = list(range(1, 9))
    with socket.create_connection((host, int(port))) as sock:
        send(sock, Kind.OFFER, {"transfer": "odd", "geometry": G.to_json()}, tokens_bytes(tokens))
        sock.recv(4096)
        send(sock, Kind.DATA, {"transfer": "odd", "first": 0, "blocks": 2}, b"y" * 10)
    status = ask(node.listen, Kind.WAIT, {"transfer": "odd", "timeout_s": 5}).header
    assert status["state"] == "failed" and "expected" in status["reason"]
    assert node.store.held_bytes == 0


def test_the_store_evicts_least_recent_blocks_beyond_its_capacity():
    store = BlockStore(capacity_bytes=2 * G.block_bytes)
    store.geometry = G
    a, b = list(range(1, 5)), list(range(11, 15))
    ka, kb = block_keys(a, 4), block_keys(b, 4)
    data = [bytes(G.block_bytes)]
    store.put(ka, data, None)
    store.put(kb, data, None)
    assert store.leading(ka) == 1  # a is now the more recent
    store.put(block_keys(list(range(21, 25)), 4), data, None)
    assert store.leading(kb) == 0 and store.leading(ka) == 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_garbage_is_refused_with_a_wire_error(data):
    try:
        frame = decode(data)
    except WireError:
        return
    assert data[:4] == MAGIC and frame.kind in Kind  # only a well-formed frame decodes


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), max_size=40), st.integers(1, 9))
def test_block_keys_name_a_block_and_its_whole_prefix(tokens, block):
    keys = block_keys(tokens, block)
    assert len(keys) == len(tokens) // block
    for i in range(len(keys)):
        assert block_keys(tokens[: (i + 1) * block], block) == keys[: i + 1]
    if keys:
        changed = [tokens[0] ^ 1, *tokens[1:]]
        assert set(block_keys(changed, block)).isdisjoint(keys)
