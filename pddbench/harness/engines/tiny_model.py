"""A random tiny Llama for real engines on a CPU: Hugging Face folder and GGUF file.

Owns the model the engine scenarios serve: a 2-layer, hidden-128 Llama with random
weights (seeded) and a word-level tokenizer whose vocabulary covers the materialiser's
token-ID range ``[first_id, vocab_size)``, written as a Hugging Face folder (for vLLM)
and a GGUF file (for llama.cpp) from the same weights. Its outputs are noise; what is
real is the engine around it: scheduling, the prefix cache, the KV memory, the stream.
Numpy only; idempotent (a folder whose stamp matches the spec is left alone).

The vocabulary: ids 0-255 are the 256 byte-level symbols (so llama.cpp's byte-level BPE
can spell any text it tokenizes itself), 256-259 are ``<s> </s> <unk> <pad>``, the rest
are the words ``t<id>``. The materialiser never sends ids below its ``first_id``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pddbench.errors import UserError
from pddbench.harness.engines.cache import models_dir, read_stamp, stamp_matches, write_stamp
from pddbench.harness.engines.formats import U32, I32Array, write_gguf, write_safetensors

BOS_ID, EOS_ID, UNK_ID, PAD_ID = 256, 257, 258, 259
SPECIALS = {BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>", PAD_ID: "<pad>"}
FIRST_WORD_ID = 260
MODEL_NAME = "pddbench-tiny-llama"
GGUF_NAME = "tiny-llama.gguf"
HF_DIR = "hf"


@dataclass(frozen=True)
class TinyModelSpec:
    vocab_size: int = 32000
    hidden: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int = 2
    intermediate: int = 256
    max_positions: int = 131072
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size <= FIRST_WORD_ID:
            raise UserError(f"vocab size must exceed {FIRST_WORD_ID} (got {self.vocab_size})")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise UserError("hidden must divide by heads, heads by kv_heads")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class TinyModel:
    """Where a made model lies."""

    root: Path
    spec: TinyModelSpec

    @property
    def hf_dir(self) -> Path:
        return self.root / HF_DIR

    @property
    def gguf(self) -> Path:
        return self.root / GGUF_NAME


def default_model_dir(vocab_size: int = 32000) -> Path:
    return models_dir() / f"tiny-llama-v{vocab_size}"


def byte_symbols() -> list[str]:
    """GPT-2's byte-level alphabet: byte b → one printable unicode character."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table: dict[int, str] = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def vocabulary(vocab_size: int) -> list[str]:
    words = byte_symbols() + [SPECIALS[i] for i in sorted(SPECIALS)]
    words += [f"t{i}" for i in range(FIRST_WORD_ID, vocab_size)]
    return words


def random_weights(spec: TinyModelSpec) -> dict[str, np.ndarray]:
    """Hugging Face ``LlamaForCausalLM`` tensors (names and (out, in) shapes)."""
    rng = np.random.default_rng(spec.seed)
    h, q, kv, ff = (
        spec.hidden,
        spec.heads * spec.head_dim,
        spec.kv_heads * spec.head_dim,
        (spec.intermediate),
    )

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)

    out = {"model.embed_tokens.weight": mat(spec.vocab_size, h)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "self_attn.q_proj.weight"] = mat(q, h)
        out[p + "self_attn.k_proj.weight"] = mat(kv, h)
        out[p + "self_attn.v_proj.weight"] = mat(kv, h)
        out[p + "self_attn.o_proj.weight"] = mat(h, q)
        out[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "mlp.gate_proj.weight"] = mat(ff, h)
        out[p + "mlp.up_proj.weight"] = mat(ff, h)
        out[p + "mlp.down_proj.weight"] = mat(h, ff)
    out["model.norm.weight"] = np.ones(h, np.float32)
    out["lm_head.weight"] = mat(spec.vocab_size, h)
    return out


_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_tensor_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{_GGUF_NAMES[rest]}"


def _hf_files(spec: TinyModelSpec, folder: Path, weights: dict[str, np.ndarray]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_positions,
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "vocab_size": spec.vocab_size,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID})
    )
    words = vocabulary(spec.vocab_size)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": tok,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, tok in sorted(SPECIALS.items())
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "WordLevel",
            "vocab": {w: i for i, w in enumerate(words)},
            "unk_token": SPECIALS[UNK_ID],
        },
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    specials = {
        "bos_token": SPECIALS[BOS_ID],
        "eos_token": SPECIALS[EOS_ID],
        "unk_token": SPECIALS[UNK_ID],
        "pad_token": SPECIALS[PAD_ID],
    }
    (folder / "special_tokens_map.json").write_text(json.dumps(specials))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": spec.max_positions,
                "clean_up_tokenization_spaces": False,
                **specials,
            }
        )
    )
    write_safetensors(folder / "model.safetensors", weights, dtype="BF16")


def _gguf_file(spec: TinyModelSpec, path: Path, weights: dict[str, np.ndarray]) -> None:
    words = vocabulary(spec.vocab_size)
    types = [1] * len(words)  # normal
    for i in (BOS_ID, EOS_ID, PAD_ID):
        types[i] = 3  # control
    types[UNK_ID] = 2
    metadata = {
        "general.architecture": "llama",
        "general.name": MODEL_NAME,
        "general.file_type": U32(0),  # all F32
        "general.alignment": U32(32),
        "llama.context_length": U32(spec.max_positions),
        "llama.embedding_length": U32(spec.hidden),
        "llama.block_count": U32(spec.layers),
        "llama.feed_forward_length": U32(spec.intermediate),
        "llama.attention.head_count": U32(spec.heads),
        "llama.attention.head_count_kv": U32(spec.kv_heads),
        "llama.rope.dimension_count": U32(spec.head_dim),
        "llama.rope.freq_base": float(spec.rope_theta),
        "llama.attention.layer_norm_rms_epsilon": float(spec.rms_eps),
        "llama.vocab_size": U32(spec.vocab_size),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": words,
        "tokenizer.ggml.token_type": I32Array(types),
        "tokenizer.ggml.merges": [],
        "tokenizer.ggml.bos_token_id": U32(BOS_ID),
        "tokenizer.ggml.eos_token_id": U32(EOS_ID),
        "tokenizer.ggml.unknown_token_id": U32(UNK_ID),
        "tokenizer.ggml.padding_token_id": U32(PAD_ID),
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.add_eos_token": False,
    }
    write_gguf(path, metadata, {gguf_tensor_name(k): v for k, v in weights.items()})


def make_tiny_model(
    out: Path | None = None, spec: TinyModelSpec | None = None, *, force: bool = False
) -> tuple[TinyModel, bool]:
    """Write (or find) the tiny model; returns it and whether it was written now."""
    spec = spec or TinyModelSpec()
    root = out or default_model_dir(spec.vocab_size)
    model = TinyModel(root, spec)
    wanted = {"spec": asdict(spec), "format": 2}
    if not force and stamp_matches(root, wanted) and model.gguf.is_file():
        return model, False
    if root.is_dir() and any(root.iterdir()) and "spec" not in (read_stamp(root) or {}):
        raise UserError(f"{root} exists and is not a tiny-model folder: choose another --out")
    weights = random_weights(spec)
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")  # whole folder appears at once
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        _hf_files(spec, tmp / HF_DIR, weights)
        _gguf_file(spec, tmp / GGUF_NAME, weights)
        write_stamp(tmp, wanted)
        shutil.rmtree(root, ignore_errors=True)
        try:
            tmp.rename(root)
        except OSError:
            if not stamp_matches(root, wanted):  # not a concurrent maker's identical model
                raise
    except OSError as exc:
        raise UserError(f"cannot write the tiny model to {root}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model, True
