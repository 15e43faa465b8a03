"""The public OpenAI-compatible ``/v1/completions`` surface: request validation and chunk shapes.

Owns what a client sends and sees; no sockets. A request must carry ``prompt`` as a list of
token IDs (text is refused with a 400 saying so); ``max_tokens``, ``min_tokens``,
``ignore_eos``, ``stream``, ``stream_options.include_usage`` and ``seed`` are honoured;
sampling fields (``temperature``, ``top_p``, ...) are accepted and ignored (the output is a
deterministic function of seed, request id and position — see
:mod:`pddbench.servers.tokens`).

Streaming shape: each ``data:`` chunk carries ``choices[0].text`` and
``choices[0].token_ids`` (one or more tokens); the chunk with the last token carries
``finish_reason``; then one final chunk with ``choices: []``, the ``pdd`` object (the
server-side story of the request) and, with ``include_usage``, ``usage`` including
``prompt_tokens_details.cached_tokens``; then ``data: [DONE]``. A failure after the stream
started is one ``data: {"error": {...}}`` chunk, then the stream ends.
"""

from __future__ import annotations

import json
import time
from array import array
from dataclasses import dataclass
from typing import Any

_IGNORED = {
    "temperature",
    "top_p",
    "top_k",
    "n",
    "best_of",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "user",
    "stop",
    "stop_token_ids",
    "return_token_ids",
    "echo",
    "suffix",
    "model",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "include_stop_str_in_output",
}
_KNOWN = _IGNORED | {
    "prompt",
    "max_tokens",
    "min_tokens",
    "ignore_eos",
    "stream",
    "stream_options",
    "seed",
}


class BadRequest(Exception):
    """A request the server refuses with HTTP 400 (message says why)."""


@dataclass(frozen=True)
class CompletionRequest:
    prompt: array  # token IDs as uint32
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    seed: int | None
    model: str


def _int(body: dict[str, Any], key: str, default: int, lo: int) -> int:
    v = body.get(key, default)
    if v is None:
        return default
    if type(v) is not int or v < lo:
        raise BadRequest(f"`{key}` must be an integer >= {lo}, got {v!r}")
    return v


def _bool(body: dict[str, Any], key: str, default: bool) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if type(v) is not bool:
        raise BadRequest(f"`{key}` must be true or false, got {v!r}")
    return v


def parse_request(body: object, *, max_context: int, default_model: str) -> CompletionRequest:
    """Validate a decoded JSON body (raises :class:`BadRequest` with one clear line)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise BadRequest(f"unsupported field(s): {', '.join(unknown)}")
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest("`prompt` is required (a list of token IDs)")
    if isinstance(prompt, str):
        raise BadRequest(
            "text prompts are not supported: send `prompt` as a list of token IDs "
            "(the reference servers have no tokenizer)"
        )
    if not isinstance(prompt, list) or not prompt:
        raise BadRequest("`prompt` must be a non-empty list of token IDs")
    if isinstance(prompt[0], list):
        raise BadRequest("batched prompts (a list of lists) are not supported: send one prompt")
    try:
        ids = array("I", prompt)  # C-speed check: integers in [0, 2**32)
    except (TypeError, OverflowError):
        bad = next((t for t in prompt if type(t) is not int or not 0 <= t < 2**32), prompt[0])
        raise BadRequest(
            f"`prompt` must contain only token IDs (integers >= 0), got {bad!r}"
        ) from None
    n = body.get("n", 1)
    if n not in (1, None):
        raise BadRequest("`n` must be 1")
    max_tokens = _int(body, "max_tokens", 16, 1)
    min_tokens = _int(body, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise BadRequest(f"`min_tokens` ({min_tokens}) exceeds `max_tokens` ({max_tokens})")
    if len(prompt) + max_tokens > max_context:
        raise BadRequest(
            f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds the model's "
            f"context of {max_context} tokens"
        )
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("`stream_options` must be an object")
    seed = body.get("seed")
    if seed is not None and type(seed) is not int:
        raise BadRequest(f"`seed` must be an integer, got {seed!r}")
    model = body.get("model") or default_model
    return CompletionRequest(
        prompt=ids,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos", False),
        stream=_bool(body, "stream", False),
        include_usage=_bool(opts, "include_usage", False),
        seed=seed,
        model=str(model),
    )


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class ChunkWriter:
    """Formats the SSE chunks of one completion (fast path for token chunks)."""

    def __init__(self, request_id: str, model: str) -> None:
        self.id = f"cmpl-{request_id}"
        self.model = model
        self.created = int(time.time())
        self._head = (
            '{"id":'
            + json.dumps(self.id)
            + ',"object":"text_completion","created":'
            + str(self.created)
            + ',"model":'
            + json.dumps(model)
            + ',"choices":[{"index":0,"text":"'
        )

    def tokens(self, ids: list[int], finish_reason: str | None) -> bytes:
        text = "".join(f" {t}" for t in ids)
        fr = "null" if finish_reason is None else json.dumps(finish_reason)
        return (
            "data: "
            + self._head
            + text
            + '","token_ids":'
            + json.dumps(ids)
            + ',"logprobs":null,"finish_reason":'
            + fr
            + "}]}\n\n"
        ).encode()

    def final(self, pdd: dict[str, Any], usage_obj: dict[str, Any] | None) -> bytes:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "pdd": pdd,
        }
        if usage_obj is not None:
            obj["usage"] = usage_obj
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"

    @staticmethod
    def error(message: str, status: int = 502) -> bytes:
        return b"data: " + json.dumps(error_body(message, status)).encode() + b"\n\n"

    def whole(
        self,
        ids: list[int],
        finish_reason: str | None,
        usage_obj: dict[str, Any],
        pdd: dict[str, Any],
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(f" {t}" for t in ids),
                    "token_ids": ids,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage_obj,
            "pdd": pdd,
        }
