"""Fixtures shared by the real-engine tests: the small agentic trace they replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = Path(__file__).parent / "engine_ci.toml"
PDDBENCH = [sys.executable, "-m", "pddbench"]


@pytest.fixture(scope="session")
def ci_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``engine_ci.toml`` synthesised: 7 sessions, 41 requests, 5-9K-token contexts."""
    path = tmp_path_factory.mktemp("engine-trace") / "engine-ci.parquet"
    res = subprocess.run(
        [*PDDBENCH, "trace", "synth", "--profile", str(PROFILE), "-o", str(path), "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return path
