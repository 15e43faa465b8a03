"""``PddTcpConnector``: vLLM's KV connector (V1 API) over the pddbench KV node.

vLLM loads this module by path (``kv_connector_module_path``) in its own environment.
A request says what to do with its KV in ``kv_transfer_params["pddbench"]``:

* ``{"push": ["host:port", ...], "transfer": ID}`` (prefill side): when the prompt's
  prefill completes, its blocks (the partial last one included) are copied out of the
  paged cache in that step and pushed, in the background, to each destination's node;
  only the blocks a destination lacks cross.
* ``{"load": ID, "wait_s": S}`` (decode side): the scheduler asks its own node how many
  prompt tokens it can supply (at most all but the last prompt token, which the engine
  computes to get its logits); while transfer ``ID`` is still arriving (and for at most
  ``S`` seconds) the request waits (``None``: ask again later). The worker copies the
  pinned blocks into the request's own blocks before the step. External tokens need not
  be block-aligned: a prompt that extends a pushed one by the relay's ``k`` tokens
  (Extend-Decode) loads the pushed prompt and computes only the ``k``.

The scheduler and the worker are separate processes on the CPU backend (and on GPUs):
the worker owns the node (its store, listener and pusher); the scheduler reaches it over
loopback (LOOKUP). Everything else about sockets lives in :mod:`.node`.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.logger import init_logger

from pddbench.harness.engines.kvtcp.node import KvNode, PushJob, split_address
from pddbench.harness.engines.kvtcp.store import BlockStore
from pddbench.harness.engines.kvtcp.wire import Geometry, Kind, WireError, recv, send, tokens_bytes

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = init_logger(__name__)
PARAMS = "pddbench"
DEFAULT_WAIT_S = 30.0


@dataclass
class LoadSpec:
    request: str
    block_ids: list[int]
    start: int  # first token to load (the locally cached prefix ends here)
    end: int  # one past the last


@dataclass
class SaveSpec:
    request: str
    transfer: str
    tokens: list[int]
    block_ids: list[int]
    dests: list[str]


@dataclass
class TcpMeta(KVConnectorMetadata):
    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)


class _LocalNode:
    """The scheduler's one connection to its own worker's node (LOOKUP)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def lookup(self, request: str, transfer: str, tokens: list[int], limit: int) -> dict:
        header = {"request": request, "transfer": transfer, "limit": limit}
        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._sock is None:
                        host, port = split_address(self.address)
                        self._sock = socket.create_connection((host, port), timeout=5.0)
                    send(self._sock, Kind.LOOKUP, header, tokens_bytes(tokens))
                    return recv(self._sock, (Kind.FOUND,)).header
                except (OSError, WireError) as exc:
                    if self._sock is not None:
                        self._sock.close()
                    self._sock = None
                    if attempt:
                        logger.warning("KV lookup at %s failed: %s", self.address, exc)
        return {"tokens": 0, "state": "unknown"}


def _layer_order(name: str) -> tuple[int, str]:
    found = re.search(r"layers\.(\d+)\.", name)
    return (int(found.group(1)) if found else 0, name)


class PddTcpConnector(KVConnectorBase_V1):
    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        cfg = self._kv_transfer_config
        self._block = int(vllm_config.cache_config.block_size)
        listen = str(cfg.get_from_extra_config("listen", "127.0.0.1:0"))
        self._listen = listen
        # scheduler side
        self._local = _LocalNode(listen)
        self._push: dict[str, tuple[str, list[str]]] = {}
        self._plans: dict[str, tuple[int, int]] = {}
        self._to_load: dict[str, tuple[int, int]] = {}
        self._first_asked: dict[str, float] = {}
        self._prompts: dict[str, list[int]] = {}
        self._blocks: dict[str, list[int]] = {}
        # worker side
        self._node: KvNode | None = None
        self._caches: list[torch.Tensor] = []
        self._block_dim = 0
        self._geometry: Geometry | None = None
        if role == KVConnectorRole.WORKER:
            peers = cfg.get_from_extra_config("peers", []) or []
            store = BlockStore(int(float(cfg.get_from_extra_config("store_gib", 1.0)) * 2**30))
            self._node = KvNode(
                listen,
                store,
                peers=[str(p) for p in peers],
                streams=int(cfg.get_from_extra_config("streams", 2)),
            )

    # ==============================  worker side  ==============================
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        names = sorted(kv_caches, key=_layer_order)
        caches = [kv_caches[n] for n in names]
        first = caches[0]
        blocks = int(self._kv_cache_config.num_blocks)
        dims = [d for d in range(min(2, first.dim())) if first.shape[d] == blocks]
        if not dims or any(c.shape != first.shape for c in caches):
            raise RuntimeError(
                f"pddbench KV connector: no block dimension of size {blocks} in a cache of "
                f"shape {tuple(first.shape)}, or layers of different shapes"
            )
        self._block_dim = dims[0]  # 0 on the CPU backend (LBHNC); 1 where K/V lead
        self._caches = caches
        shape = tuple(int(x) for i, x in enumerate(first.shape) if i != self._block_dim)
        self._geometry = Geometry(
            layers=len(caches),
            block=self._block,
            shape=shape,
            dtype=str(first.dtype).removeprefix("torch."),
            itemsize=first.element_size(),
        )
        assert self._node is not None
        self._node.store.geometry = self._geometry
        self._node.start()

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, TcpMeta)
        if not meta.loads:
            return
        assert self._node is not None and self._geometry is not None
        g = self._geometry
        dtype = self._caches[0].dtype
        bd = self._block_dim
        for load in meta.loads:
            pinned = self._node.store.take(load.request)
            if pinned is None or pinned.tokens < load.end:
                raise RuntimeError(f"KV for request {load.request} vanished before its load")
            bs = g.block
            for j in range(load.start // bs, (load.end - 1) // bs + 1):
                data = torch.frombuffer(pinned.blocks[j], dtype=torch.uint8)
                src = data.view(dtype).view(g.layers, *g.shape)
                bid = load.block_ids[j]
                # Whole blocks, the partial last one too: the backend's layout inside a
                # block is its own (the CPU kernels pack it per ISA), and every block
                # loaded here is the request's alone (``start`` is where its locally
                # cached, shared prefix ends; positions past ``end`` it computes itself).
                for layer, cache in enumerate(self._caches):
                    cache.select(bd, bid).copy_(src[layer], non_blocking=True)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kw: Any
    ) -> None:
        return  # the whole prompt is copied out once, after the step (wait_for_save)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, TcpMeta) or not meta.saves:
            return
        assert self._node is not None and self._geometry is not None
        g = self._geometry
        for save in meta.saves:
            nb = -(-len(save.tokens) // g.block)
            device = self._caches[0].device
            idx = torch.tensor(save.block_ids[:nb], dtype=torch.long, device=device)
            bd = self._block_dim
            layers = [c.index_select(bd, idx).movedim(bd, 0) for c in self._caches]
            stacked = torch.stack(layers, dim=1)  # [blocks, layers, *one layer's block]
            raw = stacked.to("cpu").contiguous().view(torch.uint8).reshape(nb, -1).numpy()
            blocks = [memoryview(raw[i]) for i in range(nb)]
            for dest in save.dests:
                self._node.pusher.push(dest, PushJob(save.transfer, save.tokens, g, blocks))

    def shutdown(self) -> None:
        if self._node is not None:
            self._node.stop()

    # ==============================  scheduler side  ==============================
    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        params = (request.kv_transfer_params or {}).get(PARAMS) or {}
        rid = request.request_id
        prompt = list(request.prompt_token_ids or [])
        if params.get("push") and params.get("transfer"):
            self._push[rid] = (str(params["transfer"]), [str(d) for d in params["push"]])
        transfer = params.get("load")
        limit = len(prompt) - 1
        if not transfer or num_computed_tokens >= limit:
            return 0, False
        found = self._local.lookup(rid, str(transfer), prompt, limit)
        first = self._first_asked.setdefault(rid, time.monotonic())
        wait_s = float(params.get("wait_s", DEFAULT_WAIT_S))
        if found.get("state") in ("receiving", "unknown") and time.monotonic() - first < wait_s:
            return None, False
        ext = max(0, int(found.get("tokens", 0)) - num_computed_tokens)
        if ext:
            self._plans[rid] = (num_computed_tokens, num_computed_tokens + ext)
        else:
            self._plans.pop(rid, None)
        return ext, False

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        plan = self._plans.pop(request.request_id, None)
        if num_external_tokens > 0 and plan is not None:
            self._to_load[request.request_id] = plan

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = TcpMeta()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            rid = new.req_id
            block_ids = list(new.block_ids[0])
            self._blocks[rid] = block_ids
            prompt = list(new.prompt_token_ids or [])
            self._prompts[rid] = prompt
            plan = self._to_load.pop(rid, None)
            if plan is not None:
                meta.loads.append(LoadSpec(rid, block_ids, plan[0], plan[1]))
            self._maybe_save(meta, rid, new.num_computed_tokens + scheduled.get(rid, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids and new_ids is not None:
                self._blocks[rid] = list(new_ids[0])
            elif new_ids is not None:
                self._blocks.setdefault(rid, []).extend(new_ids[0])
            self._maybe_save(meta, rid, cached.num_computed_tokens[i] + scheduled.get(rid, 0))
        return meta

    def _maybe_save(self, meta: TcpMeta, rid: str, computed_after_step: int) -> None:
        push = self._push.get(rid)
        prompt = self._prompts.get(rid)
        if push is None or prompt is None or computed_after_step < len(prompt):
            return
        del self._push[rid]
        meta.saves.append(SaveSpec(rid, push[0], prompt, list(self._blocks[rid]), push[1]))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict | None]:
        rid = request.request_id
        for d in (
            self._push,
            self._plans,
            self._to_load,
            self._first_asked,
            self._prompts,
            self._blocks,
        ):
            d.pop(rid, None)
        return False, None
