"""The tiny model's files: shapes, vocabulary, formats, and idempotent writing."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest

from pddbench.errors import UserError
from pddbench.harness.engines.formats import (
    read_gguf_header,
    read_safetensors_header,
    to_bfloat16,
    write_gguf,
)
from pddbench.harness.engines.tiny_model import (
    FIRST_WORD_ID,
    TinyModelSpec,
    byte_symbols,
    gguf_tensor_name,
    make_tiny_model,
    vocabulary,
)
from pddbench.workloads.materialize import Materializer

SPEC = TinyModelSpec(vocab_size=2048, max_positions=4096)


def test_hf_folder_matches_config_and_covers_the_materialiser_ids(tmp_path) -> None:
    model, fresh = make_tiny_model(tmp_path / "m", SPEC)
    assert fresh
    config = json.loads((model.hf_dir / "config.json").read_text())
    assert config["vocab_size"] == 2048 and config["model_type"] == "llama"
    header = read_safetensors_header(model.hf_dir / "model.safetensors")
    embed = header["model.embed_tokens.weight"]
    assert embed["dtype"] == "BF16" and embed["shape"] == [2048, SPEC.hidden]
    q = header["model.layers.1.self_attn.q_proj.weight"]
    assert q["shape"] == [SPEC.heads * SPEC.head_dim, SPEC.hidden]
    assert len([k for k in header if k != "__metadata__"]) == 3 + 9 * SPEC.layers
    ends = sorted(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    size = (model.hf_dir / "model.safetensors").stat().st_size
    (n,) = struct.unpack("<Q", (model.hf_dir / "model.safetensors").read_bytes()[:8])
    assert size == 8 + n + ends[-1]

    tok = json.loads((model.hf_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert len(vocab) == 2048 and sorted(vocab.values()) == list(range(2048))
    ids = Materializer(128, vocab_size=2048, first_id=1000).prompt([1, 2], 256)
    words = {i: w for w, i in vocab.items()}
    assert all(words[i] == f"t{i}" for i in ids)  # every prompt id is a plain word


def test_gguf_carries_the_same_tensors_and_vocabulary(tmp_path) -> None:
    model, _ = make_tiny_model(tmp_path / "m", SPEC)
    version, n_tensors, n_kv = read_gguf_header(model.gguf)
    assert (version, n_tensors) == (3, 3 + 9 * SPEC.layers) and n_kv > 20
    data = model.gguf.read_bytes()
    for word in (b"tokenizer.ggml.tokens", b"blk.1.ffn_down.weight", b"t2047", b"llama"):
        assert word in data
    assert gguf_tensor_name("model.layers.3.mlp.gate_proj.weight") == "blk.3.ffn_gate.weight"
    assert gguf_tensor_name("lm_head.weight") == "output.weight"


def test_vocabulary_layout() -> None:
    words = vocabulary(1000)
    assert len(words) == len(set(words)) == 1000
    assert words[:256] == byte_symbols() and len(set(byte_symbols())) == 256
    assert words[256:260] == ["<s>", "</s>", "<unk>", "<pad>"]
    assert words[FIRST_WORD_ID] == f"t{FIRST_WORD_ID}"
    with pytest.raises(UserError):
        TinyModelSpec(vocab_size=100)


def test_second_make_is_a_no_op_and_force_rewrites(tmp_path) -> None:
    make_tiny_model(tmp_path / "m", SPEC)
    start = time.monotonic()
    _, fresh = make_tiny_model(tmp_path / "m", SPEC)
    assert not fresh and time.monotonic() - start < 0.5
    _, fresh = make_tiny_model(tmp_path / "m", SPEC, force=True)
    assert fresh
    _, fresh = make_tiny_model(tmp_path / "m", TinyModelSpec(vocab_size=2048, seed=1))
    assert fresh  # another spec is another model


def test_a_foreign_folder_is_never_overwritten(tmp_path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(UserError, match="not a tiny-model folder"):
        make_tiny_model(tmp_path, SPEC)
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_bfloat16_rounds_to_nearest_even() -> None:
    values = np.array([1.0, -2.5, 3.14159, 1 + 2**-8, 1 + 3 * 2**-8, 0.0], np.float32)
    back = (to_bfloat16(values).astype(np.uint32) << 16).view(np.float32)
    assert back.tolist() == [1.0, -2.5, 3.140625, 1.0, 1 + 2**-6, 0.0]


def test_gguf_rejects_unknown_value_types(tmp_path) -> None:
    with pytest.raises(TypeError):
        write_gguf(tmp_path / "x.gguf", {"k": object()}, {})  # type: ignore[dict-item]
