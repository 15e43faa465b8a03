"""Real engines on this machine: install (vLLM CPU, llama.cpp), tiny models, launching.

Owns the engine cache (``$PDDBENCH_ENGINE_CACHE``, default ``~/.cache/pddbench/engines``):
the vLLM virtual environment, the llama-server binary and the random tiny model they
serve, and the launcher that scenario argv templates call. Nothing here runs at import.
"""
