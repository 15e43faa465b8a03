"""One request's lifecycle, shared by both drive backends: execute, then settle exactly once.

A backend opens a record (``stream_records.record_for``) when the player says a request
is due, executes it, and then — whatever happened — calls :meth:`RequestLifecycle.settle`
once. Settling turns the outcome into the record's final state (a client-side exception
becomes a failure of class ``client``; a cancellation, ``cancelled``), stamps its end,
and fires ``request_settled`` to every listener in the order they were added (Locust's
``events.request`` is the pattern): for the asyncio backend the journal, the live
counters and the player; for a Locust worker its outbox, its counters, Locust's own
request events and the player. Sans-IO: no sockets, no event loop; must not decide
timing (the player does) or write anything itself (the listeners do).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pddbench.harness.drive.stream_records import fail_record
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.records import ErrorClass, RequestRecord, Status

log = logging.getLogger("pddbench.drive")

CANCELLED_IN_FLIGHT = "cancelled before completion"
CANCELLED_UNSENT = "cancelled before it was sent"


@dataclass(frozen=True)
class Settled:
    """A request that has ended, with its final record (``request_settled``'s payload)."""

    request: PlannedRequest
    record: RequestRecord
    itl: np.ndarray | None = None  # the stream's inter-token intervals, when kept

    @property
    def ok(self) -> bool:
        return self.record.status == Status.OK


Listener = Callable[[Settled], None]


class RequestLifecycle:
    """The ``request_settled`` event of one backend and the rule that settles a record."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` for every settled request (after those added before it)."""
        self._listeners.append(listener)

    def settle(
        self,
        request: PlannedRequest,
        record: RequestRecord,
        *,
        error: BaseException | None = None,
        cancelled: bool = False,
        unsent: bool = False,
        itl: np.ndarray | None = None,
    ) -> Settled:
        """Finish ``record`` from how its execution ended, then fire ``request_settled``.

        ``error``: the exception the client raised (a failure of class ``client``: the
        harness, not the server, failed); ``cancelled``: the run stopped it (``unsent``:
        before it was sent). A record the client already failed keeps its own class."""
        if cancelled:
            if record.status == Status.OK:
                why = CANCELLED_UNSENT if unsent else CANCELLED_IN_FLIGHT
                fail_record(record, self.clock, ErrorClass.CANCELLED, why, status=Status.CANCELLED)
        elif error is not None:
            log.warning("request %s failed in the client: %r", request.request_id, error)
            log.debug("client failure", exc_info=error)
            fail_record(record, self.clock, ErrorClass.CLIENT, f"client error: {error!r}")
        if record.end_s is None:
            record.end_s = self.clock()
        event = Settled(request, record, itl)
        for listener in self._listeners:
            listener(event)
        return event
