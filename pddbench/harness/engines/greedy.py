"""Greedy equivalence of a disaggregated deployment: the check a PD engineer runs first.

At temperature 0 the tokens a request gets through a disaggregated deployment (KV computed
on P, moved by the connector, decoded on D, or on RLD then MD after an Extend-Decode
handoff) must equal the tokens one colocated instance produces for the same prompt. The
colocated reference is the deployment's own prefill instance decoding the whole request
alone: the same engine build, weights and dtype, so a difference is the disaggregation's.
CPU kernels are not batch-invariant, so a near-tie may flip a token: differences are
counted and their first position reported, never hidden.

Owns the comparison (:func:`first_difference`, :class:`GreedySummary`, sans-IO) and the
requests that feed it (:func:`compare`: one request at a time through the front door and
then to the reference). Deploying and choosing prompts are the caller's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from pddbench.harness.drive.stream_records import ChunkList, SseReader


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where ``a`` and ``b`` differ (a length difference counts); None
    when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class GreedyCase:
    request_id: str
    prompt: list[int]
    max_tokens: int


@dataclass(frozen=True)
class GreedyResult:
    request_id: str
    pipeline: str  # what the front door's story says ("P->D", "P->MD", "P->RLD->MD", ...)
    relay_tokens: int  # tokens RLD produced before the handoff (0 when none)
    tokens: int
    first_diff: int | None  # None: identical
    error: str | None = None

    @property
    def identical(self) -> bool:
        return self.error is None and self.first_diff is None


@dataclass
class GreedySummary:
    deployment: str
    results: list[GreedyResult] = field(default_factory=list)

    @property
    def identical(self) -> int:
        return sum(r.identical for r in self.results)

    @property
    def share(self) -> float:
        return self.identical / len(self.results) if self.results else 0.0

    def lines(self) -> list[str]:
        total = len(self.results)
        out = [
            f"{self.deployment}: identical sequences {self.identical}/{total} "
            f"({self.share:.1%}) at temperature 0 against the colocated reference"
        ]
        by = Counter(r.pipeline for r in self.results)
        same = Counter(r.pipeline for r in self.results if r.identical)
        for pipeline, n in sorted(by.items()):
            handoffs = sum(1 for r in self.results if r.pipeline == pipeline and r.relay_tokens)
            extra = f", {handoffs} with an Extend-Decode after RLD tokens" if handoffs else ""
            out.append(f"  {pipeline}: {same[pipeline]}/{n} identical{extra}")
        for r in self.results:
            if r.error is not None:
                out.append(f"  {r.request_id}: failed: {r.error}")
            elif r.first_diff is not None:
                seam = f", handoff after {r.relay_tokens}" if r.relay_tokens else ""
                out.append(
                    f"  {r.request_id} ({r.pipeline}{seam}): first difference at token "
                    f"{r.first_diff} of {r.tokens}"
                )
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "deployment": self.deployment,
            "identical": self.identical,
            "requests": len(self.results),
            "results": [r.__dict__ | {"identical": r.identical} for r in self.results],
        }


async def _stream(
    session: aiohttp.ClientSession, url: str, body: dict
) -> tuple[list[int], dict | None]:
    """Token ids of a streamed completion and the ``pdd`` story of its last chunk."""
    tokens: list[int] = []
    story: dict | None = None
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        chunks = ChunkList()
        reader = SseReader(chunks)
        async for data in resp.content.iter_any():
            stop = reader.feed(0.0, data)
            for chunk in chunks.take():
                for choice in chunk.get("choices") or []:
                    tokens.extend(choice.get("token_ids") or [])
                if isinstance(chunk.get("pdd"), dict):
                    story = chunk["pdd"]
            if reader.server_error is not None:
                raise RuntimeError(reader.server_error[:200])
            if stop:
                break
    return tokens, story


async def compare(
    deployment: str,
    front_url: str,
    reference_url: str,
    model: str,
    cases: Sequence[GreedyCase],
    *,
    timeout_s: float = 300.0,
) -> GreedySummary:
    """Each case through the front door, then alone on the reference; one at a time."""
    summary = GreedySummary(deployment)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for case in cases:
            body = {
                "model": model,
                "prompt": case.prompt,
                "max_tokens": case.max_tokens,
                "temperature": 0.0,
                "ignore_eos": True,
                "return_token_ids": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            try:
                got, story = await _stream(session, front_url + "/v1/completions", body)
                want, _ = await _stream(session, reference_url + "/v1/completions", body)
            except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
                summary.results.append(
                    GreedyResult(case.request_id, "?", 0, 0, None, str(exc) or type(exc).__name__)
                )
                continue
            story = story or {}
            summary.results.append(
                GreedyResult(
                    case.request_id,
                    str(story.get("pipeline") or "?"),
                    int(story.get("relay_tokens") or 0),
                    len(got),
                    first_difference(got, want),
                )
            )
    return summary
