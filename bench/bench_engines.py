"""Prints what real engines cost here: install check, start-up, cold vs cached TTFT.

For each engine (vLLM CPU, llama.cpp): run the idempotent installer (so the first run
on a machine also prints the install/build time), start the engine through the same
launcher the scenarios use, time until ``/health`` answers, then send a cold prompt of
N tokens and the same prompt extended by one block, and print TTFT of both and the
cached tokens the engine reported. Figures only; no pass/fail.

    .venv/bin/python bench/bench_engines.py [--engines vllm,llamacpp] [--tokens 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from pddbench.harness.engines.install import install
from pddbench.harness.engines.tiny_model import MODEL_NAME, make_tiny_model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _ttft(url: str, prompt: list[int]) -> tuple[float, int | None]:
    body = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    first = None
    cached = None
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            if not raw.startswith(b"data:") or raw[5:].strip() == b"[DONE]":
                continue
            chunk = json.loads(raw[5:])
            if first is None and chunk.get("choices"):
                first = time.monotonic() - start
            usage = chunk.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens", cached)
    return (first or float("nan")), cached


def bench(engine: str, tokens: int) -> None:
    done = install(engine, log=lambda line: print(f"  {line}", flush=True))
    print(f"{engine}: install {'took' if done.fresh else 'check'} {done.seconds:.1f} s")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pddbench.harness.engines.launch", engine, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                print(f"{engine}: exited with status {proc.returncode} during start-up")
                return
            time.sleep(0.2)
        print(f"{engine}: start-up {time.monotonic() - start:.1f} s")
        prompt = [1000 + (i * 7919) % 30000 for i in range(tokens)]
        cold, c0 = _ttft(url, prompt)
        warm, c1 = _ttft(url, prompt + [1234] * 128)
        print(f"{engine}: TTFT {tokens} tokens cold {cold * 1e3:.0f} ms (cached {c0}), "
              f"+128 tokens warm {warm * 1e3:.0f} ms (cached {c1})")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--engines", default="vllm,llamacpp")
    p.add_argument("--tokens", type=int, default=4096)
    args = p.parse_args()
    make_tiny_model()
    for engine in args.engines.split(","):
        bench(engine.strip(), args.tokens)


if __name__ == "__main__":
    main()
