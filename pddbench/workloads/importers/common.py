"""Shared pieces of the trace importers: the result type, input checks, typed field
access with one-line errors, hash-list assembly and hash namespacing.

Every importer reports malformed input as a :class:`~pddbench.errors.TraceError` whose
message is one line ``FILE: WHERE: what is wrong`` (``WHERE`` is ``line N`` for line- and
row-oriented formats, a JSON path such as ``requests[3]`` for nested ones). This module
owns that wording. It must not know any particular trace format.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.errors import TraceError, UserError
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import hashes_from_flat


@dataclass
class ImportResult:
    """A trace converted to the canonical schema, ready for ``traceio.write_trace``."""

    table: pa.Table
    epoch: str | None
    source: dict[str, object]
    warnings: list[str] = field(default_factory=list)

    @property
    def num_requests(self) -> int:
        return self.table.num_rows

    @property
    def num_sessions(self) -> int:
        return count_sessions(self.table)


def count_sessions(table: pa.Table) -> int:
    """Number of distinct session ids in a canonical table."""
    if table.num_rows == 0:
        return 0
    return int(pc.count_distinct(table.column(Col.SESSION_ID)).as_py())


def source_record(
    importer: str, inputs: Sequence[Path], options: Mapping[str, object]
) -> dict[str, object]:
    """The ``source`` metadata of an imported trace: importer, its options, input files."""
    return {
        "importer": importer,
        "options": dict(options),
        "inputs": [str(p) for p in inputs],
    }


def fail(where: str, message: str) -> TraceError:
    """A one-line :class:`TraceError` ``WHERE: message`` (``WHERE`` names file and place)."""
    text = f"{where}: {message}"
    return TraceError(text, details=[text])


def check_block_size_option(block_size: int, option: str = "block size") -> None:
    """Refuse a block size a replay could not run (the rule of ``validate``), before
    anything is read or written."""
    from pddbench.workloads.validate import block_size_problem

    if why := block_size_problem(block_size):
        raise UserError(f"{option} {why}: a replay could not run the trace")


def check_input_file(path: Path) -> Path:
    """``path`` if it is an existing, non-empty regular file; else a :class:`TraceError`."""
    if not path.exists():
        raise fail(str(path), "no such file")
    if path.is_dir():
        raise fail(str(path), "is a directory, expected a file")
    if path.stat().st_size == 0:
        raise fail(str(path), "file is empty")
    return path


GZIP_MAGIC = b"\x1f\x8b"


def json_lines(src: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, object)`` for each non-blank line of a JSONL file (gunzipped when it is gzip).

    ``where`` is ``FILE: line N``. A line that is not JSON, not UTF-8, nested too deeply or
    not a JSON object is a one-line :class:`TraceError` naming it; so is a damaged gzip
    stream. The file must exist and be non-empty (:func:`check_input_file`).
    """
    src = check_input_file(src)
    with src.open("rb") as fh:
        packed = fh.read(2) == GZIP_MAGIC
    opener = gzip.open if packed else open
    line_no = 0
    try:
        with opener(src, "rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                where = f"{src}: line {line_no}"
                yield where, parse_json_object(raw, where)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise fail(f"{src}: line {line_no + 1}", f"not a readable gzip stream ({exc})") from None


def parse_json_object(raw: bytes | str, where: str) -> dict[str, Any]:
    """One JSON object from ``raw``, or a one-line :class:`TraceError` saying why not."""
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        reason = (
            exc.msg if isinstance(exc, json.JSONDecodeError)
            else "nested too deeply" if isinstance(exc, RecursionError)
            else "not UTF-8"
        )
        raise fail(where, f"not valid JSON ({reason})") from None
    if not isinstance(obj, dict):
        raise fail(where, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _got(value: object) -> str:
    return f"got {_type_name(value)} {_short(value)}"


INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1


def get_int(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    *,
    minimum: int | None = 0,
    maximum: int | None = INT32_MAX,
) -> int:
    """``obj[key]`` as an integer in ``[minimum, maximum]``; an integral float is accepted."""
    if key not in obj:
        raise fail(where, f"missing field {key!r}")
    value = obj[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise fail(where, f"field {key!r} must be an integer, {_got(value)}")
    if minimum is not None and value < minimum:
        raise fail(where, f"field {key!r} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise fail(where, f"field {key!r} must be <= {maximum}, got {value}")
    return value


MAX_NUMBER = 1e12  # 31 years in ms, 31,000 years in s
MAX_UNIX_MS = 1e13  # the year 2286: a Unix time in milliseconds past it is not a time


def get_number(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    *,
    minimum: float | None = 0.0,
    maximum: float = MAX_NUMBER,
) -> float:
    """``obj[key]`` as a finite number in ``[minimum, maximum]``."""
    if key not in obj:
        raise fail(where, f"missing field {key!r}")
    return _as_number(obj[key], key, where, minimum, maximum)


def get_optional_number(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    *,
    minimum: float | None = 0.0,
    maximum: float = MAX_NUMBER,
) -> float | None:
    """Like :func:`get_number` but absent or null gives ``None``."""
    value = obj.get(key)
    return None if value is None else _as_number(value, key, where, minimum, maximum)


def _as_number(
    value: object, key: str, where: str, minimum: float | None, maximum: float = MAX_NUMBER
) -> float:
    if type(value) not in (int, float):
        raise fail(where, f"field {key!r} must be a number, {_got(value)}")
    number = float(value)  # type: ignore[arg-type]
    if not np.isfinite(number):
        raise fail(where, f"field {key!r} must be finite, got {number}")
    if abs(number) > maximum:  # a time or a count past any trace's range
        raise fail(where, f"field {key!r} is out of range ({number:g}; at most {maximum:g})")
    if minimum is not None and number < minimum:
        raise fail(where, f"field {key!r} must be >= {minimum:g}, got {number:g}")
    return number


def _get_instance(obj: Mapping[str, Any], key: str, where: str, kind: type, what: str) -> Any:
    """``obj[key]``, refused unless present and an instance of ``kind`` (``what`` names it)."""
    if key not in obj:
        raise fail(where, f"missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        raise fail(where, f"field {key!r} must be {what}, {_got(value)}")
    return value


def get_str(obj: Mapping[str, Any], key: str, where: str) -> str:
    """``obj[key]`` as a string."""
    return cast(str, _get_instance(obj, key, where, str, "a string"))


def get_object(obj: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``obj[key]`` as a JSON object."""
    return cast(dict[str, Any], _get_instance(obj, key, where, dict, "an object"))


def get_list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """``obj[key]`` as a JSON array."""
    return cast(list[Any], _get_instance(obj, key, where, list, "a list"))


def get_hash_ids(obj: Mapping[str, Any], key: str, where: str) -> np.ndarray:
    """``obj[key]`` (a list of integers in ``[0, 2^64)``) as a ``uint64`` array.

    Hashes past 2^63 are kept exactly: numpy makes a list that mixes them with smaller
    values a float64 array (which would round them), so such a list takes the slow path.
    """
    values = get_list(obj, key, where)
    if not values:
        return np.zeros(0, dtype=np.uint64)
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError):  # ragged nesting and the like
        array = np.asarray([None])
    if (
        array.ndim == 1
        and (array.dtype.kind == "u" or (array.dtype.kind == "i" and array.min() >= 0))
        and bool not in set(map(type, values))  # numpy counts true as 1
    ):
        return array.astype(np.uint64, copy=False)
    for pos, value in enumerate(values):  # slow path: find and name the first bad entry
        if type(value) is not int or not 0 <= value <= UINT64_MAX:
            raise fail(
                where,
                f"field {key!r}[{pos}] must be an integer in [0, 2^64), "
                f"got {_type_name(value)} {_short(value)}",
            )
    return np.array(values, dtype=np.uint64)  # integers on both sides of 2^63


def lift_zero_outputs(
    outputs: Sequence[int] | np.ndarray, describe: Callable[[int], str]
) -> tuple[np.ndarray, list[str]]:
    """Output lengths with 0 raised to 1, and a warning naming the first such request.

    A canonical trace needs positive output lengths: a replayed request generates at
    least one token. ``describe(row)`` names a row for the warning (file and line).
    """
    out = np.asarray(outputs, dtype=np.int64)
    zero = np.flatnonzero(out == 0)
    if zero.size == 0:
        return out, []
    out = out.copy()
    out[zero] = 1
    return out, [
        f"{zero.size} request(s) with output length 0 set to 1 (a replayed request "
        f"generates at least one token); first: {describe(int(zero[0]))}"
    ]


def check_block_count(
    count: int, input_length: int, block_size: int, where: str, *, key: str = "hash_ids"
) -> None:
    """A hash list must cover the full blocks, or the full blocks plus the partial last one."""
    full = input_length // block_size
    ceil = -(-input_length // block_size)
    if count not in (full, ceil):
        want = str(full) if full == ceil else f"{full} or {ceil}"
        raise fail(
            where,
            f"field {key!r} has {count} blocks but input length {input_length} with "
            f"block size {block_size} needs {want}",
        )


class HashColumn:
    """Accumulates per-request hash arrays into one ``list<uint64>`` column."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._count = 0

    def append(self, hashes: np.ndarray) -> None:
        self._chunks.append(hashes)
        self._count += len(hashes)

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def value_count(self) -> int:
        """Number of hash values appended so far (the next value's flat index)."""
        return self._count

    def offsets(self) -> np.ndarray:
        offsets = np.zeros(len(self._chunks) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in self._chunks], out=offsets[1:])
        return offsets

    def values(self) -> np.ndarray:
        """All hash values, row after row, as ``uint64``."""
        if not self._chunks:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate(self._chunks).astype(np.uint64, copy=False)

    def to_arrow(
        self, values: np.ndarray | None = None, order: np.ndarray | None = None
    ) -> pa.ListArray:
        """The column; ``values`` replaces the flat values, ``order`` permutes the rows."""
        offsets = self.offsets()
        flat = self.values() if values is None else values
        if order is not None and len(order):
            starts, ends = offsets[:-1][order].tolist(), offsets[1:][order].tolist()
            flat = np.concatenate([flat[a:b] for a, b in zip(starts, ends, strict=True)])
            offsets = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(np.asarray(ends) - np.asarray(starts), out=offsets[1:])
        return hashes_from_flat(offsets, flat)


def namespaced_hashes(namespace: str, local_ids: np.ndarray) -> np.ndarray:
    """Map hash ids that are unique only within ``namespace`` to global ``uint64`` hashes.

    Each distinct id becomes the first 8 bytes of ``blake2b(namespace NUL id)`` (stable
    across runs and machines, unlike Python's ``hash``). Equal ids in one namespace map to
    equal hashes; ids in different namespaces collide only by 64-bit chance (~n²/2⁶⁵).
    Cost: one blake2b per *distinct* id, then a vectorised lookup.
    """
    ids = np.asarray(local_ids)
    if ids.size == 0:
        return np.zeros(0, dtype=np.uint64)
    unique, inverse = np.unique(ids, return_inverse=True)
    prefix = namespace.encode() + b"\x00"
    table = np.fromiter(
        (
            int.from_bytes(
                hashlib.blake2b(prefix + str(int(u)).encode(), digest_size=8).digest(), "little"
            )
            for u in unique.tolist()
        ),
        dtype=np.uint64,
        count=unique.size,
    )
    return table[inverse.reshape(-1)]
