"""CSV traces read with pandas, every bad cell a one-line error naming its line (shared by
the Azure and BurstGPT importers).

Lines are the file's own, 1-based, the header being line 1. Owns the CSV wording of
:func:`~.common.fail`; knows no trace format beyond the column names it is given.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.errors import UserError
from pddbench.workloads.importers.common import INT32_MAX, MAX_NUMBER, fail

_HEADER_LINES = 1


def line(row_label: int) -> int:
    """The file line of a data row (its frame index)."""
    return int(row_label) + _HEADER_LINES + 1


def read_csv(src: Path, required: Sequence[str]) -> pd.DataFrame:
    """All cells as strings (blank lines dropped, row index = line - 2); the ``required``
    columns must be in the header."""
    try:
        frame = pd.read_csv(src, skipinitialspace=True, skip_blank_lines=False, dtype=str)
    except pd.errors.EmptyDataError:
        raise fail(str(src), "file is empty") from None
    except pd.errors.ParserError as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
        match = re.search(r"line (\d+)", text)
        where = f"{src}: line {match.group(1)}" if match else str(src)
        raise fail(where, f"not valid CSV ({text})") from None
    except UnicodeDecodeError:
        raise fail(str(src), "not valid CSV (not UTF-8 text)") from None
    if not isinstance(frame.index, pd.RangeIndex):  # rows with more fields than the header
        raise _extra_fields(src)
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        have = ", ".join(frame.columns)
        raise fail(str(src), f"line 1: missing column(s) {', '.join(missing)} (header: {have})")
    # blank lines become all-null rows: drop them, keeping each row's index = line - 2
    return frame.dropna(how="all")


def _extra_fields(src: Path) -> UserError:
    """The first row with more fields than the header (pandas made them an index)."""
    with src.open(newline="", encoding="utf-8", errors="replace") as fh:
        rows = csv.reader(fh)
        width = len(next(rows, []))
        for line_no, row in enumerate(rows, start=2):
            if len(row) > width:
                return fail(f"{src}: line {line_no}",
                            f"{len(row)} fields, the header has {width}")
    return fail(str(src), "rows have more fields than the header")


def integers(src: Path, frame: pd.DataFrame, column: str, minimum: int) -> np.ndarray:
    """``column`` as int64, every cell an integer in ``[minimum, 2^31)``."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values != np.floor(values))
    bad |= (values < minimum) | (values > INT32_MAX)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail(
            f"{src}: line {line(frame.index[i])}",
            f"{column} must be an integer >= {minimum}, got {raw.iloc[i]!r}",
        )
    return values.astype(np.int64)


def numbers(
    src: Path, frame: pd.DataFrame, column: str, *, minimum: float = 0.0,
    maximum: float = MAX_NUMBER,
) -> np.ndarray:
    """``column`` as float64, every cell a finite number in ``[minimum, maximum]``."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < minimum) | (values > maximum)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise fail(
            f"{src}: line {line(frame.index[i])}",
            f"{column} must be a number in [{minimum:g}, {maximum:g}], got {raw.iloc[i]!r}",
        )
    return values
