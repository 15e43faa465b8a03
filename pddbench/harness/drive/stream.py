"""Sans-IO stream accounting: from timestamped chunks to TTFT, ITL, TPOT and token counts.

The HTTP client stamps each chunk with the run's monotonic clock and feeds it here; this
module decides what the numbers mean, so they can be tested without sockets:

* TTFT is the time of the first chunk that carries at least one output token (role-only
  or empty chunks do not count).
* A chunk carrying ``k`` tokens contributes ``k`` inter-token intervals: the gap since
  the previous token-carrying chunk split evenly across its tokens. Extra tokens that
  arrive in the *first* chunk contribute intervals of 0 (they arrived with the first).
* Output token counts come from token ids in the chunks when present, else from the
  final ``usage`` (never from counting chunks); if neither is available, text-carrying
  chunks are counted and the record says so via ``token_count_source``.
* With ``expected_token_fn`` the token ids are checked in order (reference servers emit
  a deterministic token per position), catching duplicates, gaps and reordering at a
  handoff seam. How many tokens came is judged elsewhere, for every server alike
  (:func:`pddbench.harness.drive.stream_records.output_length_problem`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class StreamSummary:
    """What a finished stream measured."""

    first_token_s: float | None
    last_token_s: float | None
    output_tokens: int
    token_count_source: str  # "token_ids" | "usage" | "chunks"
    chunks: int
    itl_s: np.ndarray  # one interval per token after the first
    cached_tokens_reported: int | None
    prompt_tokens_reported: int | None
    integrity_ok: bool | None
    integrity_error: str | None
    server_timing: dict[str, object] | None
    token_times_s: list[float]

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.last_token_s is None or self.output_tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass
class StreamAccumulator:
    """Collects chunks of one streamed completion (OpenAI or SGLang shaped)."""

    expected_token_fn: Callable[[int], int] | None = None
    chunks: int = 0
    _token_times: list[float] = field(default_factory=list)
    _ids_seen: int = 0
    _text_chunks: int = 0
    _has_ids: bool = False
    _last_token_chunk_s: float | None = None
    _usage: dict[str, object] | None = None
    _server_timing: dict[str, object] | None = None
    _integrity_error: str | None = None
    _sglang_tokens: int = 0

    def feed_openai(self, t: float, chunk: dict[str, object]) -> None:
        """One parsed ``data:`` object of an OpenAI ``/v1/completions`` stream."""
        self.chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        pdd = chunk.get("pdd")
        if isinstance(pdd, dict):
            self._server_timing = pdd
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return
        choice = choices[0] if isinstance(choices[0], dict) else {}
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            self._has_ids = True
            self._check_ids(ids)
            self._add_tokens(t, len(ids))
        elif choice.get("text"):
            self._text_chunks += 1
            self._add_tokens(t, 1)

    def feed_sglang(self, t: float, chunk: dict[str, object]) -> None:
        """One parsed object of an SGLang ``/generate`` stream (cumulative output ids)."""
        self.chunks += 1
        meta = chunk.get("meta_info")
        total = None
        if isinstance(meta, dict):
            self._usage = {
                "prompt_tokens": meta.get("prompt_tokens"),
                "completion_tokens": meta.get("completion_tokens"),
                "prompt_tokens_details": {"cached_tokens": meta.get("cached_tokens")},
            }
            total = meta.get("completion_tokens")
        ids = chunk.get("output_ids")
        if isinstance(ids, list):
            self._has_ids = True
            new = ids[self._sglang_tokens :] if len(ids) >= self._sglang_tokens else ids
            self._check_ids(new)
            self._sglang_tokens += len(new)
            self._add_tokens(t, len(new))
        elif isinstance(total, int) and total > self._sglang_tokens:
            self._add_tokens(t, total - self._sglang_tokens)
            self._sglang_tokens = total

    def _check_ids(self, ids: list[object]) -> None:
        if self.expected_token_fn is not None and self._integrity_error is None:
            for offset, token in enumerate(ids):
                position = self._ids_seen + offset
                want = self.expected_token_fn(position)
                if token != want:
                    self._integrity_error = (
                        f"token {position}: got {token}, expected {want} "
                        "(duplicate, missing or reordered token)"
                    )
                    break
        self._ids_seen += len(ids)

    def _add_tokens(self, t: float, k: int) -> None:
        if k <= 0:
            return
        prev = self._last_token_chunk_s
        if k == 1:
            self._token_times.append(t)
        elif prev is None:
            self._token_times.extend([t] * k)
        else:
            step = (t - prev) / k
            self._token_times.extend(prev + step * (i + 1) for i in range(k))
        self._last_token_chunk_s = t

    def summary(self) -> StreamSummary:
        usage = self._usage or {}
        completion = _count(usage.get("completion_tokens"))
        prompt = _count(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
        counted = len(self._token_times)
        if self._has_ids:
            source, output_tokens = "token_ids", counted
        elif isinstance(completion, int):
            source, output_tokens = "usage", completion
        else:
            source, output_tokens = "chunks", counted
        times = np.asarray(self._token_times, dtype=np.float64)
        itl = np.diff(times) if times.size > 1 else np.empty(0)
        integrity_ok: bool | None = None
        integrity_error = self._integrity_error
        if self.expected_token_fn is not None and self._has_ids:
            # identity only: how many tokens came is judged for every server alike
            # (stream_records.output_length_problem)
            integrity_ok = integrity_error is None
        return StreamSummary(
            first_token_s=float(times[0]) if times.size else None,
            last_token_s=float(times[-1]) if times.size else None,
            output_tokens=int(output_tokens),
            token_count_source=source,
            chunks=self.chunks,
            itl_s=itl,
            cached_tokens_reported=int(cached) if isinstance(cached, int) else None,
            prompt_tokens_reported=int(prompt) if isinstance(prompt, int) else None,
            integrity_ok=integrity_ok,
            integrity_error=integrity_error,
            server_timing=self._server_timing,
            token_times_s=self._token_times,
        )


def _count(value: object) -> int | None:
    """A server-reported token count, or None when it is not a count (a string, a
    negative number, or one past 64 bits)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < 2**63 else None
