"""User-facing errors: one clear line and an exit status, never a traceback.

Every module raises :class:`UserError` (or a subclass) for problems caused by input the
user controls — a malformed trace, a missing file, a bad option. The CLI turns it into
``pddbench: <message>`` on stderr and exits with ``exit_code``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic is not imported for the CLI's --help
    from pydantic import ValidationError


class UserError(Exception):
    """A problem the user can fix; printed as one line, exits with ``exit_code``."""

    exit_code: int = 2

    def __init__(
        self, message: str, *, exit_code: int | None = None, details: list[str] | None = None
    ):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        self.details: list[str] = details or []


class TraceError(UserError):
    """A trace that cannot be read or does not validate; ``details``: one line per problem."""


UNKNOWN_KEY = "unknown key (a typo?)"
# what a run folder's unknown key may also be: written by a newer pddbench
UNKNOWN_RUN_KEY = "unknown key (a typo? or a run folder from a newer pddbench)"


def first_problem(exc: ValidationError, *, unknown: str = UNKNOWN_KEY) -> tuple[str, str]:
    """A pydantic ``ValidationError``'s first error as (dotted location, message); an
    unknown key reads ``unknown`` instead of pydantic's "Extra inputs are not permitted"."""
    first = exc.errors()[0]
    msg = unknown if first["type"] == "extra_forbidden" else str(first["msg"])
    return ".".join(str(p) for p in first["loc"]), msg
