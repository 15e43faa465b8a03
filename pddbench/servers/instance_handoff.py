"""The RLD <-> MD handoff endpoints of a worker instance (I/O around :mod:`handoff`).

Owns the messages of the Extend-Decode (or KV) handoff as a mixin of
:class:`~pddbench.servers.instance.WorkerInstance`: RLD hears ``md_ready`` and POSTs the
batches its core decides (:mod:`~pddbench.servers.instance_core`, over
:class:`~pddbench.servers.handoff.RelayHandoff`) to MD; MD checks each batch's bytes and
token ids, hands it to its core (:class:`~pddbench.servers.handoff.MainHandoff`: extend,
adopt or retire) and acknowledges with its new level. A KV handoff also pays the modelled
GPU <-> host staging copy on each side (:func:`~pddbench.servers.compute.kv_copy_seconds`).
Decisions stay in the sans-IO cores; this module only moves them.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from pddbench.servers import protocol as proto
from pddbench.servers.compute import kv_copy_seconds
from pddbench.servers.handoff import (
    Adopt,
    Batch,
    HandoffError,
)
from pddbench.servers.kvlink import scaled

if TYPE_CHECKING:
    from pddbench.servers.instance import Job, WorkerInstance

    _Base = WorkerInstance
else:
    _Base = object

_ZEROS = bytes(1 << 16)


class HandoffEndpoints(_Base):
    # RLD side ----------------------------------------------------------------------------
    async def h_md_ready(self, request: web.Request) -> web.Response:
        msg = proto.MdReady.model_validate(await request.json())
        job = self._job(msg.rid)
        if job is None or job.relay is None:
            return web.json_response({"error": f"no relay of {msg.rid} on {self.id}"}, status=404)
        try:
            effects = self.core.md_ready(job, msg.level, time.monotonic())
        except HandoffError as exc:
            self._fail(job, "handoff", str(exc))
            return web.json_response({"error": str(exc)}, status=409)
        self._run(effects)
        return web.json_response({"ok": True})

    async def _send_handoff(self, job: Job, batch: Batch) -> None:
        # Extend-Decode ships token ids (control traffic); a KV handoff ships KV (bulk).
        http = self._http_for(kv=batch.mode == "kv")
        stream = job.seq.stream
        ids = [] if batch.finished else [stream.token(p) for p in range(batch.start, batch.end)]
        kv_modelled = max(0, batch.end - 1 - batch.start) * self.kvb if batch.mode == "kv" else 0
        kv_real = scaled(kv_modelled, self.dep.byte_scale)
        copy_s = 0.0
        if batch.mode == "kv":  # gather the paged KV into pinned host memory first
            copy_s = kv_copy_seconds(self.machine, kv_modelled // self.kvb, self.dep.block_size)
            await asyncio.sleep(copy_s)
        t_send = time.monotonic()
        msg = proto.HandoffMsg(
            rid=job.rid,
            start=batch.start,
            end=batch.end,
            final=batch.final,
            mode=batch.mode,
            finished=batch.finished,
            token_ids=ids,
            kv_bytes=kv_real,
            kv_modelled_bytes=kv_modelled,
            rld_instance=self.id,
            rld_address=self.address,
            t_send=t_send,
        )
        head = msg.model_dump_json().encode() + b"\n"
        body = head + (_ZEROS * (kv_real // len(_ZEROS) + 1))[:kv_real] if kv_real else head
        try:
            async with http.post(f"http://{job.peer_address}/internal/handoff", data=body) as resp:
                reply = await resp.json(content_type=None)
                if resp.status != 200:
                    raise HandoffError(f"MD {job.peer_instance} refused the handoff: {reply}")
        except (aiohttp.ClientError, OSError, ValueError, HandoffError) as exc:
            self.m.errors.inc(1, "handoff")
            self._fail(job, "handoff", f"handoff of {job.rid} to {job.peer_instance} failed: {exc}")
            return
        t_ack = time.monotonic()
        self.m.handoffs.inc(1, batch.mode)
        self.m.kv_sent.inc(len(body), job.peer_instance or "?", "handoff")
        emit = self.core.emit(
            job,
            "handoff",
            start=batch.start,
            end=batch.end,
            final=batch.final,
            mode=batch.mode,
            finished=batch.finished,
            t_send=t_send,
            t_ack=t_ack,
            payload_bytes=len(body),
            modelled_payload_bytes=len(head) + kv_modelled,
            copy_s=copy_s,
        )
        self._run(emit + self.core.handoff_acked(job, batch, reply.get("level"), t_ack))

    # MD side -----------------------------------------------------------------------------
    async def h_handoff(self, request: web.Request) -> web.Response:
        t_recv = time.monotonic()
        head = await request.content.readline()
        msg = proto.HandoffMsg.model_validate_json(head)
        got = 0
        async for piece in request.content.iter_any():
            got += len(piece)
        job = self._job(msg.rid)
        if job is not None and job.main is None and job.mode == "main-auto":
            self.core.handoff_from(job, msg.rld_address, msg.rld_instance)
        if job is None or job.main is None:
            return web.json_response(
                {"error": f"no main decode of {msg.rid} on {self.id}"}, status=404
            )
        if got != msg.kv_bytes:
            text = f"handoff KV from {msg.rld_instance} cut after {got} of {msg.kv_bytes} bytes"
            self._fail(job, "handoff", text)
            return web.json_response({"error": text}, status=400)
        stream = job.seq.stream
        for offset, tok in enumerate(msg.token_ids):
            if tok != stream.token(msg.start + offset):
                text = f"handoff token {msg.start + offset} of {msg.rid} differs from MD's"
                self._fail(job, "handoff", text)
                return web.json_response({"error": text}, status=409)
        batch = Batch(msg.start, msg.end, msg.final, msg.mode, msg.finished)
        try:
            action = self.core.handoff_arrived(job, batch)
        except HandoffError as exc:
            self._fail(job, "handoff", str(exc))
            return web.json_response({"error": str(exc)}, status=409)
        self.m.handoffs.inc(1, msg.mode)
        self.m.kv_received.inc(len(head) + got, msg.rld_instance, "handoff")
        if action is None:  # finished on RLD before MD's KV landed: retire on landing
            return web.json_response({"level": msg.end, "queued": True})
        if isinstance(action, Adopt) and msg.kv_modelled_bytes:  # scatter into MD's pages
            tokens = msg.kv_modelled_bytes // self.kvb
            await asyncio.sleep(kv_copy_seconds(self.machine, tokens, self.dep.block_size))
            if self.jobs.get(msg.rid) is not job or job.finished:
                return web.json_response({"error": f"{msg.rid} ended on {self.id}"}, status=409)
        loop = asyncio.get_running_loop()
        ack: asyncio.Future[int] = loop.create_future()
        job.acks.append(ack)
        self._run(self.core.main_act(job, action, time.monotonic()))
        level = await ack
        return web.json_response({"level": level, "t_recv": t_recv, "t_applied": time.monotonic()})

    async def _notify_ready(self, job: Job) -> None:
        assert self.http is not None
        msg = proto.MdReady(rid=job.rid, level=0, md_instance=self.id)
        try:
            async with self.http.post(
                f"http://{job.peer_address}/internal/md_ready", json=msg.model_dump()
            ) as resp:
                if resp.status != 200:
                    raise HandoffError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        except (aiohttp.ClientError, OSError, HandoffError) as exc:
            self._fail(job, "handoff", f"cannot reach relay {job.peer_instance}: {exc}")
            return
        self._run(self.core.emit(job, "md_ready", level=0, t=time.monotonic()))
