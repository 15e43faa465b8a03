"""Which event loop runs a pddbench process: uvloop where installed, else asyncio's own.

Owns that one choice for the replay client and the reference servers alike (uvloop has
several times less overhead per socket read and timer). Each caller keeps its own switch
to force the standard loop and records, if it wants, the name this returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_runner(use_uvloop: bool) -> tuple[Callable[[Coroutine[Any, Any, T]], T], str]:
    """The function that runs a coroutine to completion, and the loop's name and version."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:  # uvloop is not built for every platform (e.g. Windows)
            pass
        else:
            return uvloop.run, f"uvloop {uvloop.__version__}"
    return asyncio.run, "asyncio"
