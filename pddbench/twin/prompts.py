"""The servers' prompt block hashes of a trace request, without materialising its prompt.

The emulated run sends each request's prompt materialised from its trace block hashes
(:mod:`pddbench.workloads.materialize`: the same hash, the same tokens) and the servers
hash it in blocks of the deployment's ``block_size`` (:func:`pddbench.servers.tokens.block_hashes`),
so two prompts share a server block exactly when they share the trace blocks up to it (a
partial last trace block is its hash's first tokens); tokens past the listed blocks are
the request's own. This module gives the
twin hashes with that same sharing (values differ, equality does not): a trace block of
``f`` server blocks becomes ``f`` ids ``h * f + i``; the tail's server blocks get ids no
other request has (negative, from the request's trace row); :func:`table_hashes` reads
them row by row from a trace table's columns, in the request's prompt namespace
(:func:`~pddbench.workloads.materialize.namespaced`, as the emulated client materialises
it), and :func:`prime_hashes` those of a primed prefix
(:class:`~pddbench.harness.plan.steady.PrimeEntry`). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat
from operator import add, mul

import numpy as np
import pyarrow as pa

from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.plan.steady import PrimeEntry
from pddbench.workloads.materialize import namespaced


def server_hashes(
    trace_hashes: Sequence[int], trace_bs: int, server_bs: int, input_length: int, row: int
) -> list[int]:
    """Ids of the ``input_length // server_bs`` full server blocks of one request."""
    n = input_length // server_bs
    if trace_bs % server_bs == 0:
        f = trace_bs // server_bs
        listed = trace_hashes[: -(-input_length // trace_bs)]  # a partial last block too
        starts = list(map(mul, listed, repeat(f)))  # block h's ids h * f + i, i < f (in C)
        out = list(chain.from_iterable(map(range, starts, map(add, starts, repeat(f)))))
    elif server_bs % trace_bs == 0:  # coarser server blocks: every k-th chained hash
        k = server_bs // trace_bs
        out = list(trace_hashes[k - 1 :: k])
    else:  # no common grid: a server block is shared up to the last trace block it covers
        out = [trace_hashes[((j + 1) * server_bs) // trace_bs - 1] for j in range(n)]
        out = out[: len(trace_hashes) * trace_bs // server_bs]
    out = out[:n]
    base = -(row + 1) << 32
    return out + [base - j for j in range(len(out), n)]


def _columns(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, flat hashes, block sizes) of a trace table: no Python copy of the whole
    ``block_hashes`` column (for the whole jan-feb trace that copy alone is gigabytes)."""
    col = table.column("block_hashes").combine_chunks()
    offsets = col.offsets.to_numpy()  # into the unsliced child array, as ``values`` is
    return offsets, col.values.to_numpy(), table.column("block_size").to_numpy()


def table_hashes(table: pa.Table, server_bs: int) -> Callable[[PlannedRequest], list[int]]:
    """:func:`server_hashes` of each planned request of ``table`` (a canonical trace), in
    its prompt namespace, read from its columns when asked."""
    offsets, values, sizes = _columns(table)

    def hashes(r: PlannedRequest) -> list[int]:
        row = r.row
        listed = namespaced(values[offsets[row] : offsets[row + 1]], r.namespace).tolist()
        return server_hashes(listed, int(sizes[row]), server_bs, r.input_length, row)

    return hashes


def prime_hashes(table: pa.Table, server_bs: int) -> Callable[[PrimeEntry], list[int]]:
    """The server block hashes of a primed prefix: its row's first ``blocks`` full trace
    blocks, in its namespace (the same ids its requests' :func:`table_hashes` start with)."""
    offsets, values, sizes = _columns(table)

    def hashes(e: PrimeEntry) -> list[int]:
        start = offsets[e.row]
        listed = namespaced(values[start : start + e.blocks], e.namespace).tolist()
        bs = int(sizes[e.row])
        return server_hashes(listed, bs, server_bs, e.blocks * bs, e.row)

    return hashes
