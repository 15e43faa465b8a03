"""Prefix cache of KV blocks: a radix tree keyed by chained block hashes, plus KV memory (sans-IO).

Owns two things an instance needs to decide what it can hold:

* :class:`RadixTree` — one node per cached block; a node's key is the block's chained hash,
  so a path from the root is a prefix. ``match`` finds the longest cached prefix,
  ``insert`` adds a prompt's blocks, ``pin``/``unpin`` protect a path while a request uses
  it, ``evict`` frees least-recently-used unpinned leaves. Pinning the deepest node of a
  path protects the whole path: only leaves are ever evicted and an ancestor of a pinned
  node always has a child.
* :class:`KvPool` — an instance's KV capacity in tokens, shared by the tree's blocks and
  the private (not yet or never cached) KV of running requests; ``reserve`` evicts LRU
  blocks when it must and refuses when pinned data leaves too little room.

Recency is a logical counter, not a clock, so behaviour is deterministic and testable.
No I/O, no timing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class Node:
    """One cached block. Its children: ``one`` while it has at most one (a prompt's path is
    a chain: no dict per block to build, or to read on a walk), ``kids`` (by key, in the
    order they were added) from its second on; never both."""

    __slots__ = ("alive", "key", "kids", "last", "one", "parent", "ref")

    def __init__(self, key: int, parent: Node | None) -> None:
        self.key = key
        self.parent = parent
        self.one: Node | None = None
        self.kids: dict[int, Node] | None = None
        self.ref = 0
        self.last = 0
        self.alive = True

    def nodes_below(self) -> Iterable[Node]:
        """Its children, in the order they were added."""
        if self.one is not None:
            return (self.one,)
        return self.kids.values() if self.kids else ()

    def add(self, child: Node) -> None:
        """Hang ``child`` (a new node, its key not among the children) below this one."""
        if self.kids is not None:
            self.kids[child.key] = child
        elif self.one is None:
            self.one = child
        else:
            self.kids = {self.one.key: self.one, child.key: child}
            self.one = None

    def remove(self, child: Node) -> None:
        if self.one is child:
            self.one = None
        else:
            assert self.kids is not None
            del self.kids[child.key]


@dataclass(frozen=True)
class Match:
    node: Node  # deepest matched node (the root when nothing matched)
    blocks: int


class RadixTree:
    """Cached KV blocks of one instance, as a tree of chained block hashes."""

    def __init__(self) -> None:
        self.root = Node(0, None)
        self.root.ref = 1  # never evicted
        self.blocks = 0
        self._tick = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Node]] = []

    # -- queries -----------------------------------------------------------------------
    def match(self, hashes: Sequence[int], *, touch: bool = True) -> Match:
        """Longest cached prefix of ``hashes`` (marks it recently used unless ``touch=False``)."""
        node, n = _walk(self.root, hashes)
        if touch and n:
            self._touch(node)
        return Match(node, n)

    @property
    def evictable_blocks(self) -> int:
        """Blocks ``evict`` could free right now (unpinned subtrees)."""
        return self.blocks - self.pinned_blocks

    @property
    def pinned_blocks(self) -> int:
        """Blocks on a path to a pinned node (O(blocks); for metrics and tests)."""
        marked: set[int] = set()
        stack = list(self.root.nodes_below())
        while stack:
            node = stack.pop()
            stack.extend(node.nodes_below())
            if node.ref > 0:
                walk: Node | None = node
                while walk is not None and walk is not self.root and id(walk) not in marked:
                    marked.add(id(walk))
                    walk = walk.parent
        return len(marked)

    # -- updates -----------------------------------------------------------------------
    def insert(self, hashes: Sequence[int], start: Node | None = None) -> tuple[Node, int]:
        """Add the blocks of ``hashes`` that are missing below ``start`` (a node of this
        tree, default the root); returns (deepest node, new blocks)."""
        node, k = _walk(self.root if start is None else start, hashes)  # what is there
        new = len(hashes) - k
        if new:
            nxt = Node(hashes[k], node)
            node.add(nxt)
            node = nxt
            for h in hashes[k + 1 :]:  # below a new node every block is new: its only child
                nxt = node.one = Node(h, node)
                node = nxt
        self.blocks += new
        self._touch(node)
        return node, new

    def pin(self, node: Node) -> None:
        node.ref += 1

    def unpin(self, node: Node) -> None:
        if node.ref <= 0:
            raise ValueError("unpin of a node that is not pinned")
        node.ref -= 1
        if node.ref == 0 and node.one is None and not node.kids and node.alive:
            self._push(node)

    def evict(self, blocks: int) -> int:
        """Free up to ``blocks`` least-recently-used unpinned leaves; returns how many."""
        freed = 0
        heap = self._heap
        while freed < blocks and heap:
            last, _, node = heapq.heappop(heap)
            if not node.alive or node.ref or node.one is not None or node.kids or node.last != last:
                continue
            parent = node.parent
            assert parent is not None
            parent.remove(node)
            node.alive = False
            if node.last > parent.last:  # the uses of the path through it (see _touch)
                parent.last = node.last
            freed += 1
            if (
                parent is not self.root
                and parent.ref == 0
                and parent.one is None
                and not parent.kids
            ):
                self._push(parent)
        self.blocks -= freed
        if len(heap) > 4 * max(self.blocks, 1024):
            self._rebuild_heap()
        return freed

    # -- internals ---------------------------------------------------------------------
    def _touch(self, node: Node) -> None:
        """Mark the path to ``node`` used now. Only ``node`` is stamped: a node's ``last`` is
        read only while it is a leaf, and a node becomes a leaf when its last child is
        evicted, which hands the child's ``last`` up (``evict``) — so every leaf holds the
        latest use of any path through it, as stamping every ancestor would, in O(1)."""
        self._tick += 1
        if node is not self.root:
            node.last = self._tick
            if node.ref == 0 and node.one is None and not node.kids:
                self._push(node)

    def _push(self, node: Node) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (node.last, self._seq, node))

    def _rebuild_heap(self) -> None:
        self._heap = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root and node.ref == 0 and node.one is None and not node.kids:
                self._push(node)
            stack.extend(node.nodes_below())


class KvPool:
    """KV memory of one instance in tokens: cached blocks (tree) + private allocations."""

    def __init__(self, capacity_tokens: int, block_size: int) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.capacity_tokens = capacity_tokens
        self.block_size = block_size
        self.tree = RadixTree()
        self.private_tokens = 0

    @property
    def used_tokens(self) -> int:
        return self.tree.blocks * self.block_size + self.private_tokens

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.used_tokens

    def reserve(self, tokens: int) -> bool:
        """Allocate ``tokens`` of private KV, evicting LRU blocks if needed; False if impossible."""
        short = tokens - self.free_tokens
        if short > 0:
            need_blocks = -(-short // self.block_size)
            self.tree.evict(need_blocks)
            if tokens > self.free_tokens:
                return False
        self.private_tokens += tokens
        return True

    def prime(self, hashes: Sequence[int]) -> int:
        """Hold a prefix a history left (no request uses it): its missing blocks are
        inserted unpinned, most recently used, evicting LRU blocks for room; a prefix that
        does not fit beside the pinned data is left out. Returns the blocks added."""
        have = self.tree.match(hashes, touch=False).blocks
        tokens = (len(hashes) - have) * self.block_size
        if not self.reserve(tokens):
            return 0
        _node, new = self.tree.insert(hashes)
        self.private_tokens -= tokens
        return new

    def release(self, tokens: int) -> None:
        if tokens > self.private_tokens:
            raise ValueError(f"release of {tokens} tokens but only {self.private_tokens} held")
        self.private_tokens -= tokens

    def commit(
        self, hashes: Sequence[int], cached_tokens: int, matched: Node | None = None
    ) -> tuple[Node, int]:
        """Move a prompt's KV into the tree: insert its full blocks and free the private copy
        of what they cover beyond the ``cached_tokens`` the request found already cached
        (blocks another request inserted meanwhile are deduplicated, freeing memory).
        ``matched``: the node of those cached blocks, still in the tree (pinned), where the
        walk may start.

        Returns (deepest node, private tokens the caller no longer holds).
        """
        if matched is None:
            node, _new = self.tree.insert(hashes)
        else:
            node, _new = self.tree.insert(hashes[cached_tokens // self.block_size :], matched)
        moved = max(0, len(hashes) * self.block_size - cached_tokens)
        self.private_tokens -= moved
        return node, moved


def _walk(node: Node, hashes: Sequence[int]) -> tuple[Node, int]:
    """The deepest node below ``node`` along ``hashes``, and how many blocks it went down
    (along a chain, one attribute and one comparison per block)."""
    n = 0
    for h in hashes:
        nxt = node.one
        if nxt is None:
            kids = node.kids
            if kids is None:
                break
            nxt = kids.get(h)
            if nxt is None:
                break
        elif nxt.key != h:
            break
        node = nxt
        n += 1
    return node, n
