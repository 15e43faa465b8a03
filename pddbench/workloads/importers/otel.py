"""Importer for OpenTelemetry GenAI spans (OTLP JSON) → canonical trace.

References: the OpenTelemetry semantic conventions for generative AI
(https://opentelemetry.io/docs/specs/semconv/gen-ai/ — "gen-ai-spans": inference spans
with ``gen_ai.operation.name`` ``chat`` / ``text_completion`` / ``generate_content`` and
``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens``; "gen-ai-agent-spans":
``invoke_agent`` with ``gen_ai.agent.name``, ``execute_tool``) and the OTLP/JSON encoding
(an ``ExportTraceServiceRequest``: ``resourceSpans[].scopeSpans[].spans[]``, each span with
``traceId``, ``spanId``, ``parentSpanId``, ``startTimeUnixNano``, ``endTimeUnixNano`` and
``attributes`` as ``[{"key": …, "value": {"intValue": "521"}}]``, 64-bit integers as
strings). The input is one such JSON document, or one per line (the collector's file
exporter), optionally gzipped.

Mapping:

* an **inference span** is one request: ``gen_ai.operation.name`` is one of the three
  above, or absent on a span that carries ``gen_ai.usage.input_tokens``. Other spans
  (tools, agents, HTTP, …) are not requests; they give structure only;
* **one trace is one session** (``session_id`` = ``traceId``); turns ordered by span start
  (then file order), each turn's parent the previous turn; ``request_id`` = ``ot-NNNNNN``;
  ``agent_type`` = the ``gen_ai.agent.name`` of the nearest ``invoke_agent`` ancestor
  span (null when none). A ``parentSpanId`` chain that loops is an error;
* ``arrival_s`` = span start minus the earliest, the epoch that earliest start (UTC);
  **think time** = start minus the previous turn's end (0 when negative, counted);
* ``input_length`` = ``gen_ai.usage.input_tokens`` (older ``gen_ai.usage.prompt_tokens``
  accepted), ``output_length`` = ``gen_ai.usage.output_tokens`` (or ``completion_tokens``;
  0 becomes 1, with a warning);
* **prefix blocks are rebuilt** (:func:`~.blocks.inherited_blocks`, full blocks only):
  a turn shares with the previous turn its ``gen_ai.usage.cache_read.input_tokens`` when
  the span reports them (a measured cache hit), else the previous turn's whole prompt
  (a synthetic "history" model: an agent re-sends its conversation). The source record
  says which; prefixes shared across traces are not seen. ``block_size`` is a choice
  (64 by default);
* lost: model and provider names, message contents, tool spans' own timings (they are
  inside the think times), span status and events.

Owns parsing and mapping; does not write files (the CLI does).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pddbench.workloads.importers.blocks import inherited_blocks, nullable, think_times
from pddbench.workloads.importers.common import (
    GZIP_MAGIC,
    INT32_MAX,
    ImportResult,
    check_block_size_option,
    check_input_file,
    fail,
    get_list,
    get_str,
    json_lines,
    lift_zero_outputs,
    source_record,
)
from pddbench.workloads.importers.reconstruct import turns_by_session
from pddbench.workloads.traceio import build_table, hashes_from_flat

OTEL_BLOCK_SIZE = 64
OTEL_HASH_BASE = 0x07 << 56
REQUEST_PREFIX = "ot-"
INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
OPERATION = "gen_ai.operation.name"
INPUT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHED = "gen_ai.usage.cache_read.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
MAX_UNIX_NS = 2**63 - 1  # the year 2262


@dataclass
class _Span:
    where: str
    trace: str
    span: str
    parent: str | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def _documents(src: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """One OTLP JSON document for the whole file, or one per line."""
    src = check_input_file(src)
    data = src.read_bytes()
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise fail(str(src), f"not a readable gzip stream ({exc})") from None
    try:
        whole = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        yield from json_lines(src)  # JSONL, or names the first bad line
        return
    if not isinstance(whole, dict):
        raise fail(str(src), f"expected a JSON object, got {type(whole).__name__}")
    yield str(src), whole


def _value(raw: object, where: str) -> Any:
    """An OTLP ``AnyValue`` as a Python value (integers from their string form)."""
    if not isinstance(raw, dict):
        raise fail(where, f"attribute value must be an object, got {raw!r}")
    if "intValue" in raw:
        value = raw["intValue"]
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if type(value) is int:
            return value
        raise fail(where, f"intValue must be an integer, got {value!r}")
    for key in ("stringValue", "doubleValue", "boolValue"):
        if key in raw:
            return raw[key]
    return None


def _attributes(span: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    items = span.get("attributes")
    if items is not None and not isinstance(items, list):
        raise fail(where, f"field 'attributes' must be a list, got {items!r}"[:200])
    for k, item in enumerate(items or []):
        loc = f"{where}.attributes[{k}]"
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise fail(loc, "expected {\"key\": string, \"value\": {...}}")
        out[item["key"]] = _value(item.get("value"), loc)
    return out


def _nanos(span: dict[str, Any], key: str, where: str) -> int:
    if key not in span:
        raise fail(where, f"missing field {key!r}")
    raw = span[key]
    value = int(raw) if isinstance(raw, str) and raw.strip().isdigit() else raw
    if type(value) is not int or not 0 < value <= MAX_UNIX_NS:
        raise fail(where, f"field {key!r} must be Unix nanoseconds in (0, 2^63), got {raw!r}")
    return value


def _spans(src: Path) -> Iterator[_Span]:
    for doc_where, doc in _documents(src):
        for i, resource in enumerate(get_list(doc, "resourceSpans", doc_where)):
            rwhere = f"{doc_where}: resourceSpans[{i}]"
            if not isinstance(resource, dict):
                raise fail(rwhere, f"expected a JSON object, got {type(resource).__name__}")
            scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans"))
            if not isinstance(scopes, list):
                raise fail(rwhere, f"field 'scopeSpans' must be a list, got {scopes!r}")
            for j, scope in enumerate(scopes):
                swhere = f"{rwhere}.scopeSpans[{j}]"
                if not isinstance(scope, dict):
                    raise fail(swhere, f"expected a JSON object, got {type(scope).__name__}")
                for k, span in enumerate(get_list(scope, "spans", swhere)):
                    where = f"{swhere}.spans[{k}]"
                    if not isinstance(span, dict):
                        raise fail(where, f"expected a JSON object, got {type(span).__name__}")
                    start = _nanos(span, "startTimeUnixNano", where)
                    end = _nanos(span, "endTimeUnixNano", where)
                    if end < start:
                        raise fail(where, "endTimeUnixNano is before startTimeUnixNano")
                    parent = span.get("parentSpanId") or None
                    if parent is not None and not isinstance(parent, str):
                        raise fail(where, f"field 'parentSpanId' must be a string, got {parent!r}")
                    yield _Span(where, get_str(span, "traceId", where),
                                get_str(span, "spanId", where), parent, start, end,
                                _attributes(span, where))


def _count(attrs: dict[str, Any], keys: tuple[str, ...], where: str, minimum: int) -> int | None:
    for key in keys:
        if key in attrs:
            value = attrs[key]
            if type(value) is not int or not minimum <= value <= INT32_MAX:
                raise fail(where, f"attribute {key!r} must be an integer in [{minimum}, 2^31), "
                                  f"got {value!r}")
            return value
    return None


def _is_inference(attrs: dict[str, Any]) -> bool:
    operation = attrs.get(OPERATION)
    return operation in INFERENCE or (operation is None and INPUT_KEYS[0] in attrs)


def _agent(span: _Span, by_id: dict[tuple[str, str], _Span]) -> str | None:
    """The nearest ``invoke_agent`` ancestor's name."""
    up = by_id.get((span.trace, span.parent)) if span.parent else None
    while up is not None:  # no loops: _check_parents ran first
        if up.attributes.get(OPERATION) == "invoke_agent":
            name = up.attributes.get(AGENT_NAME)
            return str(name) if name is not None else "agent"
        up = by_id.get((up.trace, up.parent)) if up.parent else None
    return None


def _check_parents(spans: list[_Span], by_id: dict[tuple[str, str], _Span]) -> None:
    """Refuse a ``parentSpanId`` chain that loops (anywhere, not only above a call)."""
    ends: set[tuple[str, str]] = set()  # spans whose chain is known to reach a root
    for span in spans:
        walk: list[tuple[str, str]] = []
        on_walk: set[tuple[str, str]] = set()
        key: tuple[str, str] | None = (span.trace, span.span)
        while key is not None and key in by_id and key not in ends:
            if key in on_walk:
                raise fail(by_id[key].where,
                           f"parentSpanId chain of span {key[1]!r} is a loop")
            on_walk.add(key)
            walk.append(key)
            parent = by_id[key].parent
            key = (key[0], parent) if parent else None
        ends.update(walk)


def import_otel(src: Path, *, block_size: int = OTEL_BLOCK_SIZE) -> ImportResult:
    """Read OTLP JSON spans and keep the GenAI inference calls; see the module docstring."""
    check_block_size_option(block_size)
    src = Path(src)
    spans = list(_spans(src))
    by_id: dict[tuple[str, str], _Span] = {}
    for span in spans:
        key = (span.trace, span.span)
        if key in by_id:
            raise fail(span.where, f"spanId {span.span!r} already used at {by_id[key].where}")
        by_id[key] = span
    _check_parents(spans, by_id)
    calls = [s for s in spans if _is_inference(s.attributes)]
    if not calls:
        raise fail(str(src), f"no GenAI inference spans ({len(spans)} spans, none with "
                             f"{OPERATION} in {sorted(INFERENCE)})")
    inputs, outputs, cached, agents = [], [], [], []
    for span in calls:
        size = _count(span.attributes, INPUT_KEYS, span.where, 1)
        if size is None:
            raise fail(span.where, f"missing attribute {INPUT_KEYS[0]!r}")
        out = _count(span.attributes, OUTPUT_KEYS, span.where, 0)
        if out is None:
            raise fail(span.where, f"missing attribute {OUTPUT_KEYS[0]!r}")
        hit = _count(span.attributes, (CACHED,), span.where, 0)
        inputs.append(size)
        outputs.append(out)
        cached.append(-1 if hit is None else min(hit, size))
        agents.append(_agent(span, by_id))

    n = len(calls)
    start_ns = np.asarray([s.start_ns for s in calls], dtype=np.int64)
    first = int(start_ns.min())
    arrival = (start_ns - first) / 1e9
    end = (np.asarray([s.end_ns for s in calls], dtype=np.int64) - first) / 1e9
    codes = pd.factorize(pd.Series([s.trace for s in calls], dtype=object))[0]
    turns = turns_by_session(codes, arrival)
    think, early = think_times(turns.previous, arrival, end)
    warnings = []
    if early:
        warnings.append(f"{early} inference span(s) start before the previous one ends; "
                        "their think time is 0")
    measured = np.asarray(cached) >= 0
    history = np.asarray(inputs)[np.maximum(turns.previous, 0)]
    shared = np.where(measured, cached, history)
    offsets, values = inherited_blocks(
        parent=turns.previous, turn=turns.turn, shared_tokens=shared,
        input_length=np.asarray(inputs), block_size=block_size, base=OTEL_HASH_BASE,
    )
    later = turns.previous >= 0
    synthetic = int(np.count_nonzero(later & ~measured))
    hashes_note = (
        f"rebuilt: {int(np.count_nonzero(later & measured))} turn(s) share their "
        f"{CACHED}, {synthetic} the previous turn's whole prompt (synthetic history model)"
    )
    if synthetic:
        warnings.append(f"{synthetic} turn(s) report no {CACHED}; their prefix hits come "
                        "from a synthetic history model (the previous prompt is re-sent)")
    output_length, zero = lift_zero_outputs(outputs, lambda i: calls[i].where)
    warnings.extend(zero)
    width = max(6, len(str(n - 1)))
    ids = np.array([f"{REQUEST_PREFIX}{i:0{width}d}" for i in range(n)], dtype=object)
    table = build_table(
        request_id=ids.tolist(),
        session_id=[s.trace for s in calls],
        turn_index=turns.turn,
        arrival_s=arrival,
        input_length=np.asarray(inputs, dtype=np.int32),
        output_length=output_length,
        block_size=block_size,
        block_hashes=hashes_from_flat(offsets, values),
        parent_request_id=[ids[p] if p >= 0 else None for p in turns.previous.tolist()],
        think_time_s=nullable(think),
        agent_type=agents,
    )
    source = source_record("otel", [src], {"block_size": block_size})
    source.update(hashes=hashes_note, spans=len(spans))
    epoch = datetime.fromtimestamp(first / 1e9, tz=UTC).isoformat()
    return ImportResult(table=table, epoch=epoch, source=source, warnings=warnings)
