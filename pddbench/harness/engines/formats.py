"""Model weight files written with numpy alone: safetensors and GGUF (version 3).

Owns the byte layout of the two formats the engines load — safetensors for vLLM (and
any Hugging Face loader; float32 or bfloat16), GGUF for llama.cpp (float32) — and the metadata
value types a Llama GGUF needs. Writes files; reads back only what the tests check
(headers), never a model. No torch, no ``gguf`` package.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

# -- safetensors -------------------------------------------------------------------------


def to_bfloat16(a: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even."""
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def write_safetensors(path: Path, tensors: Mapping[str, np.ndarray], *, dtype: str = "F32") -> None:
    """Write float ``tensors`` (C order, little endian) as one safetensors file, stored as
    ``F32`` or ``BF16``."""
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"unsupported safetensors dtype {dtype}")
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    arrays: list[np.ndarray] = []
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype="<f4")
        if dtype == "BF16":
            a = to_bfloat16(a)
        header[name] = {
            "dtype": dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
        arrays.append(a)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for a in arrays:
            f.write(a.tobytes())


def read_safetensors_header(path: Path) -> dict[str, object]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


# -- GGUF --------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_ALIGNMENT = 32
GGML_TYPE_F32 = 0


class GgufType:
    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = range(10)
    UINT64, INT64, FLOAT64 = 10, 11, 12


@dataclass(frozen=True)
class U32:
    value: int


@dataclass(frozen=True)
class I32Array:
    values: Sequence[int]


GgufValue = str | int | float | bool | U32 | I32Array | list[str]


def _gguf_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf_value(v: GgufValue) -> bytes:
    """Type tag + payload. Python ints are UINT32 unless wrapped; floats are FLOAT32."""
    if isinstance(v, bool):
        return struct.pack("<IB", GgufType.BOOL, int(v))
    if isinstance(v, U32):
        return struct.pack("<II", GgufType.UINT32, v.value)
    if isinstance(v, int):
        return struct.pack("<II", GgufType.UINT32, v)
    if isinstance(v, float):
        return struct.pack("<If", GgufType.FLOAT32, v)
    if isinstance(v, str):
        return struct.pack("<I", GgufType.STRING) + _gguf_str(v)
    if isinstance(v, I32Array):
        arr = np.asarray(v.values, dtype="<i4")
        return struct.pack("<IIQ", GgufType.ARRAY, GgufType.INT32, arr.size) + arr.tobytes()
    if isinstance(v, list):
        body = b"".join(_gguf_str(s) for s in v)
        return struct.pack("<IIQ", GgufType.ARRAY, GgufType.STRING, len(v)) + body
    raise TypeError(f"unsupported GGUF value {type(v).__name__}")


def _pad(f: BinaryIO, alignment: int = GGUF_ALIGNMENT) -> None:
    f.write(b"\0" * (-f.tell() % alignment))


def write_gguf(
    path: Path, metadata: Mapping[str, GgufValue], tensors: Mapping[str, np.ndarray]
) -> None:
    """Write a GGUF v3 file with float32 ``tensors`` (numpy shape order; GGUF stores the
    dimensions innermost first, so an (out, in) matrix is ``ne = [in, out]``)."""
    arrays = {k: np.ascontiguousarray(a, dtype="<f4") for k, a in tensors.items()}
    with open(path, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(arrays), len(metadata)))
        for key, value in metadata.items():
            f.write(_gguf_str(key) + _gguf_value(value))
        offset = 0
        for name, a in arrays.items():
            dims = list(reversed(a.shape))
            f.write(_gguf_str(name) + struct.pack("<I", len(dims)))
            f.write(struct.pack(f"<{len(dims)}Q", *dims))
            f.write(struct.pack("<IQ", GGML_TYPE_F32, offset))
            offset += a.nbytes + (-a.nbytes % GGUF_ALIGNMENT)
        _pad(f)
        for a in arrays.values():
            f.write(a.tobytes())
            _pad(f)


def read_gguf_header(path: Path) -> tuple[int, int, int]:
    """(version, tensor count, metadata count) of a GGUF file."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
    return version, n_tensors, n_kv
