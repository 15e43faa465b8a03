"""Where installed engines and tiny models live, and how a finished step is stamped.

Owns the cache layout (one folder per engine and version, one for models) and the stamp
files that make installs idempotent: a stamp records what was installed and from what;
a step whose stamp matches (and whose product still exists) is not redone. No network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CACHE_ENV = "PDDBENCH_ENGINE_CACHE"
STAMP = "installed.json"


def engine_cache_dir() -> Path:
    """``$PDDBENCH_ENGINE_CACHE``, else ``~/.cache/pddbench/engines``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "pddbench" / "engines"


def models_dir(cache: Path | None = None) -> Path:
    return (cache or engine_cache_dir()) / "models"


def read_stamp(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_stamp(folder: Path, data: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (STAMP + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(folder / STAMP)


def stamp_matches(folder: Path, wanted: dict[str, Any]) -> bool:
    """Whether ``folder``'s stamp records exactly the ``wanted`` keys and values."""
    have = read_stamp(folder)
    return have is not None and all(have.get(k) == v for k, v in wanted.items())
