"""RLD → MD handoff: the decisions on both sides, as sans-IO state machines.

Owns *what* is handed over and *when*; the instances do the I/O. Positions follow
:mod:`pddbench.servers.engine`: MD "ready at level p" means MD holds the KV of output tokens
``[0, p)`` and knows token ``p`` (level 0: it has the prompt KV and the first token, which
the prefill computed). RLD has emitted tokens ``[0, e)``.

A handoff is a sequence of :class:`Batch` es ``[start, end)`` sent by RLD:

* **one-shot** — one final batch ``[p, e)``; RLD stops and is released at once; MD extends
  ``e - p`` tokens in one step (a visible stall when that is large) and emits token ``e``;
* **catch-up** — while more than ``catch_up_threshold`` tokens are pending, RLD sends a
  non-final batch of ``threshold`` tokens and keeps decoding; MD extends it and reports its
  new level; when at most ``threshold`` are pending RLD sends the final batch and stops;
* **adaptive** — each decision picks one-shot when RLD's load
  (:meth:`pddbench.servers.engine.Engine.load`: KV memory held by its requests against its
  capacity, its decode batch against ``max_batch``, ≥ 1 while requests queue for memory) is
  at or above ``adaptive_load_threshold``, else catch-up: a relay that memory limits hands
  off at once to free room, an idle one keeps the stream smooth;
* **KV transfer (ablation)** — instead of token IDs RLD ships the KV of the tokens it
  processed (one final batch, like one-shot); MD adopts it and decodes on.

A final batch with ``finished=True`` tells MD the request ended on RLD (MD keeps the prompt
KV for its prefix cache and emits nothing). The user sees RLD's tokens ``[0, e)`` then MD's
tokens from ``e``: every position exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class HandoffSchedule(StrEnum):
    ONE_SHOT = "one-shot"
    CATCH_UP = "catch-up"
    ADAPTIVE = "adaptive"


class HandoffTransfer(StrEnum):
    EXTEND = "extend"  # token IDs only; MD recomputes their KV (Extend-Decode)
    KV = "kv"  # ship RLD's KV of the generated tokens (ablation)


@dataclass(frozen=True)
class HandoffPolicy:
    schedule: HandoffSchedule = HandoffSchedule.ADAPTIVE
    transfer: HandoffTransfer = HandoffTransfer.EXTEND
    catch_up_threshold: int = 64
    adaptive_load_threshold: float = 0.5


@dataclass(frozen=True)
class Batch:
    start: int
    end: int
    final: bool
    mode: str  # "one-shot" | "catch-up" | "kv" | "finished-on-relay"
    finished: bool = False

    @property
    def tokens(self) -> int:
        return self.end - self.start


class HandoffError(Exception):
    """A handoff message that breaks the protocol (a bug, reported as a request error)."""


def choose_schedule(policy: HandoffPolicy, load: float) -> HandoffSchedule:
    """The schedule for one decision, given RLD's current load (see the module docstring)."""
    if policy.schedule is not HandoffSchedule.ADAPTIVE:
        return policy.schedule
    if load >= policy.adaptive_load_threshold:
        return HandoffSchedule.ONE_SHOT
    return HandoffSchedule.CATCH_UP


class RelayState(StrEnum):
    WAIT_MD = "wait-md"
    MD_READY = "md-ready"
    IN_FLIGHT = "in-flight"
    DONE = "done"


class RelayHandoff:
    """RLD's side: decides the batches."""

    def __init__(self, policy: HandoffPolicy) -> None:
        self.policy = policy
        self.state = RelayState.WAIT_MD
        self.level = 0
        self.batches: list[Batch] = []

    def md_ready(self, level: int) -> None:
        """MD holds the prompt KV (level 0) or applied a non-final batch (level = its end)."""
        if self.state is RelayState.DONE:
            return
        if self.state is RelayState.IN_FLIGHT:
            last = self.batches[-1]
            if level != last.end:
                raise HandoffError(f"MD reports level {level} after batch ending at {last.end}")
        elif self.state is RelayState.MD_READY:
            raise HandoffError("MD reported ready twice")
        self.level = level
        self.state = RelayState.MD_READY

    def decide(self, emitted: int, load: float) -> Batch | None:
        """Called at RLD step boundaries (and when MD reports): the batch to send now, if any."""
        if self.state is not RelayState.MD_READY:
            return None
        if emitted < self.level:
            raise HandoffError(f"MD is at level {self.level} but RLD emitted only {emitted}")
        pending = emitted - self.level
        if self.policy.transfer is HandoffTransfer.KV:
            batch = Batch(self.level, emitted, True, "kv")
        else:
            schedule = choose_schedule(self.policy, load)
            threshold = self.policy.catch_up_threshold
            if schedule is HandoffSchedule.ONE_SHOT or pending <= threshold:
                batch = Batch(self.level, emitted, True, schedule.value)
            else:
                batch = Batch(self.level, self.level + threshold, False, schedule.value)
        self.batches.append(batch)
        self.state = RelayState.DONE if batch.final else RelayState.IN_FLIGHT
        return batch

    def finish(self, emitted: int) -> Batch | None:
        """The request ended on RLD: the notice for MD (None if a final batch already went)."""
        if self.state is RelayState.DONE:
            return None
        batch = Batch(emitted, emitted, True, "finished-on-relay", finished=True)
        self.batches.append(batch)
        self.state = RelayState.DONE
        return batch

    @property
    def mode(self) -> str | None:
        """The handoff mode to report: catch-up if any non-final batch went, else the last's."""
        if not self.batches:
            return None
        if any(not b.final for b in self.batches):
            return HandoffSchedule.CATCH_UP.value
        return self.batches[-1].mode


class MainState(StrEnum):
    WAIT_KV = "wait-kv"
    READY = "ready"
    APPLYING = "applying"
    DECODING = "decoding"
    DONE = "done"


@dataclass(frozen=True)
class NotifyReady:
    level: int


@dataclass(frozen=True)
class Extend:
    k: int
    final: bool


@dataclass(frozen=True)
class Adopt:
    seam: int


@dataclass(frozen=True)
class Retire:
    """The request finished on RLD: keep the prompt KV in the cache, emit nothing."""


Action = NotifyReady | Extend | Adopt | Retire


class MainHandoff:
    """MD's side: validates batches and says what to do with them."""

    def __init__(self) -> None:
        self.state = MainState.WAIT_KV
        self.level = 0
        self.seam: int | None = None
        self._finished_early = False
        self._final: Batch | None = None

    @property
    def pending_final(self) -> bool:
        """The batch being applied is the final one."""
        return self._final is not None

    def kv_landed(self) -> Action:
        if self.state is not MainState.WAIT_KV:
            raise HandoffError(f"prompt KV landed twice (state {self.state})")
        if self._finished_early:
            self.state = MainState.DONE
            return Retire()
        self.state = MainState.READY
        return NotifyReady(0)

    def on_batch(self, batch: Batch) -> Action | None:
        """A batch arrived from RLD. Returns the action, or None when it must wait for the KV."""
        if batch.finished:
            if self.state is MainState.WAIT_KV:
                self._finished_early = True
                return None
            self.state = MainState.DONE
            return Retire()
        if self.state is not MainState.READY:
            raise HandoffError(f"batch [{batch.start}, {batch.end}) arrived in state {self.state}")
        if batch.start != self.level or batch.end < batch.start:
            raise HandoffError(
                f"batch [{batch.start}, {batch.end}) does not start at MD's level {self.level}"
            )
        self.state = MainState.APPLYING
        self._final = batch if batch.final else None
        if batch.mode == HandoffTransfer.KV.value:
            self.seam = batch.end
            return Adopt(batch.end)
        return Extend(batch.tokens, batch.final)

    def applied(self, level: int) -> Action | None:
        """MD's extend (or adoption) finished at ``level``."""
        if self.state is not MainState.APPLYING:
            raise HandoffError(f"extend finished in state {self.state}")
        self.level = level
        if self._final is not None:
            self.seam = self._final.end
            self.state = MainState.DECODING
            return None
        self.state = MainState.READY
        return NotifyReady(level)
