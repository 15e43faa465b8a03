"""Traces: the canonical schema and its I/O, validation, importers, the synthetic agentic
generator, the hit-rate model, prompt materialisation and inspection. No I/O to servers."""
