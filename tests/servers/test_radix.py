"""Prefix cache: radix tree of chained block hashes and the KV pool that evicts from it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pddbench.servers.radix import KvPool, RadixTree


def test_insert_then_match_longest_prefix() -> None:
    t = RadixTree()
    node, new = t.insert([1, 2, 3])
    assert new == 3 and t.blocks == 3
    assert t.match([1, 2, 3, 4]).blocks == 3
    assert t.match([1, 2, 9]).blocks == 2
    assert t.match([7]).blocks == 0
    _, new = t.insert([1, 2, 5])  # shares two blocks
    assert new == 1 and t.blocks == 4
    assert t.match([1, 2, 5]).node is not node


def test_evict_lru_leaves_first() -> None:
    t = RadixTree()
    t.insert([1, 2])  # older
    t.insert([3, 4])
    t.match([1, 2])  # touch: [3, 4] is now least recently used
    assert t.evict(1) == 1
    assert t.match([3, 4]).blocks == 1  # leaf 4 went first
    assert t.match([1, 2]).blocks == 2
    assert t.evict(10) == 3
    assert t.blocks == 0


def test_pinned_path_is_never_evicted() -> None:
    t = RadixTree()
    node, _ = t.insert([1, 2, 3])
    t.insert([1, 9])
    t.pin(node)
    assert t.evict(10) == 1  # only block 9
    assert t.match([1, 2, 3]).blocks == 3
    assert t.pinned_blocks == 3
    t.unpin(node)
    assert t.evict(10) == 3
    assert t.blocks == 0


def test_pinning_deepest_node_protects_ancestors_only_while_pinned() -> None:
    t = RadixTree()
    mid, _ = t.insert([1, 2])
    _deep, _ = t.insert([1, 2, 3, 4])
    t.pin(mid)
    assert t.evict(10) == 2  # 4 then 3; 1-2 pinned
    assert t.match([1, 2, 3]).blocks == 2
    t.unpin(mid)
    assert t.evict(10) == 2


def test_pool_reserve_evicts_then_refuses_when_pinned() -> None:
    pool = KvPool(capacity_tokens=64, block_size=16)
    assert pool.reserve(48)
    _node, moved = pool.commit([11, 12, 13], cached_tokens=0)  # 48 tokens move into the tree
    pool.release(48 - moved)
    assert pool.tree.blocks == 3 and pool.private_tokens == 0 and pool.free_tokens == 16
    assert pool.reserve(32)  # evicts one LRU block
    assert pool.tree.blocks == 2
    pool.tree.pin(pool.tree.match([11, 12]).node)
    assert not pool.reserve(32)  # only pinned blocks left to evict
    assert pool.private_tokens == 32


def test_commit_deduplicates_blocks_inserted_meanwhile() -> None:
    pool = KvPool(capacity_tokens=1000, block_size=10)
    assert pool.reserve(30) and pool.reserve(30)  # two requests, same prompt, both uncached
    _, moved_a = pool.commit([1, 2, 3], 0)
    _, moved_b = pool.commit([1, 2, 3], 0)
    assert moved_a == moved_b == 30
    assert pool.tree.blocks == 3 and pool.used_tokens == 30  # the copy was freed


def test_commit_from_the_matched_node_is_a_commit_from_the_root() -> None:
    """The engine commits a prompt from the node its admission matched (pinned): the same
    tree, deepest node and freed private KV as walking from the root."""
    pools = [KvPool(capacity_tokens=1000, block_size=10) for _ in range(2)]
    results = []
    for k, pool in enumerate(pools):
        assert pool.reserve(20)
        pool.commit([1, 2], 0)
        m = pool.tree.match([1, 2, 3, 4])
        pool.tree.pin(m.node)
        assert pool.reserve(40)
        node, moved = pool.commit([1, 2, 3, 4], m.blocks * 10, m.node if k else None)
        results.append((node.key, node.parent.key if node.parent else None, moved))
        assert pool.tree.match([1, 2, 3, 4]).node is node
    assert results[0] == results[1] == (4, 3, 20)
    assert pools[0].tree.blocks == pools[1].tree.blocks == 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 6)), min_size=1, max_size=60))
def test_accounting_invariants_under_random_use(ops: list[tuple[int, int]]) -> None:
    """Used never exceeds capacity; pinned paths survive; releasing everything empties private."""
    rng = random.Random(len(ops))
    pool = KvPool(capacity_tokens=200, block_size=4)
    live: list[tuple[object, int, list[int]]] = []
    for branch, length in ops:
        hashes = [branch * 100 + i for i in range(length)]
        match = pool.tree.match(hashes)
        pool.tree.pin(match.node)
        cached = match.blocks * 4
        need = length * 4 - cached + 3
        if not pool.reserve(need):
            pool.tree.unpin(match.node)
            continue
        node, moved = pool.commit(hashes, cached)
        pool.tree.pin(node)
        pool.tree.unpin(match.node)
        live.append((node, need - moved, hashes))
        assert pool.used_tokens <= pool.capacity_tokens
        for _, _, h in live:
            assert pool.tree.match(h, touch=False).blocks == len(h)
        if live and rng.random() < 0.4:
            node, private, _ = live.pop(rng.randrange(len(live)))
            pool.tree.unpin(node)  # type: ignore[arg-type]
            pool.release(private)
    for node, private, _ in live:
        pool.tree.unpin(node)  # type: ignore[arg-type]
        pool.release(private)
    assert pool.private_tokens == 0
    pool.tree.evict(10**6)
    assert pool.tree.blocks == 0 and pool.used_tokens == 0


def _alive_paths(tree: RadixTree) -> set[tuple[int, ...]]:
    out: set[tuple[int, ...]] = set()
    stack = [((), tree.root)]
    while stack:
        path, node = stack.pop()
        for child in node.nodes_below():
            out.add((*path, child.key))
            stack.append(((*path, child.key), child))
    return out


def test_eviction_takes_the_least_recently_used_unpinned_leaf() -> None:
    """Against a brute-force LRU: a node's last use is the latest match or insert whose path
    went through it; evict frees, one at a time, the unpinned leaf used longest ago (the
    tree stamps only a path's end and hands a leaf's stamp to its parent on eviction)."""
    rng = random.Random(7)
    for _ in range(30):
        tree = RadixTree()
        used: dict[tuple[int, ...], int] = {}
        pins: dict[tuple[int, ...], int] = {}
        tick = 0
        for _ in range(300):
            path = tuple(rng.randrange(3) for _ in range(rng.randrange(1, 7)))
            op = rng.random()
            alive = _alive_paths(tree)
            if op < 0.4:
                node, _ = tree.insert(path)
                touched = path
            elif op < 0.6:
                m = tree.match(path)
                touched = path[: m.blocks]
                node = m.node
            elif op < 0.75 and alive:
                target = rng.choice(sorted(alive))
                node = tree.match(target, touch=False).node
                if pins.get(target) and rng.random() < 0.6:
                    tree.unpin(node)
                    pins[target] -= 1
                else:
                    tree.pin(node)
                    pins[target] = pins.get(target, 0) + 1
                continue
            else:
                k = rng.randrange(1, 4)
                expect = set(alive)
                for _ in range(k):
                    leaves = [
                        p
                        for p in expect
                        if not pins.get(p) and not any(q[:-1] == p for q in expect)
                    ]
                    if not leaves:
                        break
                    expect.discard(min(leaves, key=lambda p: used[p]))
                freed = tree.evict(k)
                assert _alive_paths(tree) == expect
                assert freed == len(alive) - len(expect) and tree.blocks == len(expect)
                continue
            del node
            tick += 1
            for j in range(1, len(touched) + 1):
                used[touched[:j]] = tick
