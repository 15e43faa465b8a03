"""Shared fixtures of the harness tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[Callable[..., str]]:
    """Start ``tests.harness.sse_server`` processes (a real SSE server); yields a starter."""
    procs: list[subprocess.Popen[str]] = []

    def start(tokens_per_chunk: int = 1, delay: float = 0.0) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.sse_server", str(tokens_per_chunk), str(delay)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        return url

    yield start
    for p in procs:
        p.kill()
        p.wait()
