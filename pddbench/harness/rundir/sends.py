"""The send log: one line (the request id) per request the client sent, as it is sent.

The journal holds a record once a request ends, so a SIGKILL loses what was in flight:
those requests reached the server but no record says so. The send log keeps that they
were sent, so a resumed run's ``sent_requests`` counts every request the server saw
(a request in flight at the kill and sent again after the resume counts twice, as the
server saw it twice). Each line is one unbuffered ``O_APPEND`` write, so no send waits
in a buffer when the process dies. Must not: read clocks or know about records.
"""

from __future__ import annotations

import os
from pathlib import Path


class SendLog:
    """Appends one line per sent request to a run folder's ``sends.log``."""

    def __init__(self, path: str | Path):
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self._fd: int | None = os.open(path, flags, 0o644)

    def sent(self, request_id: str) -> None:
        if self._fd is not None:
            os.write(self._fd, request_id.encode("utf-8", "replace") + b"\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def count_sends(path: str | Path) -> int | None:
    """Sends logged in ``path`` (complete lines), or None when the run has no send log
    (written by an older pddbench, or by an engine that keeps none)."""
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return None
