"""``python -m pddbench.harness.engines.launch ENGINE --host H --port P [-- ARGS]``.

The command scenario argv templates call to start a real engine from the engine cache:
it finds the installed engine (or says in one line how to install it), makes the tiny
model if it is missing, and then *replaces itself* (``exec``) with the engine's server,
so the process the harness started, health-checks and stops is the engine itself.
Arguments after ``--`` go to the engine unchanged. GPU-only engines refuse at once, in
one line, on a machine without an NVIDIA GPU.

Engines: ``vllm`` (CPU build, OpenAI API, block size 128; ``--kv-listen`` adds pddbench's
KV connector over TCP for PD and PDD deployments), ``llamacpp`` (llama-server,
OpenAI API, exact-token per-slot cache), and ``gpu`` — ``launch gpu -- PROGRAM ARGS``
checks for an NVIDIA GPU and execs ``PROGRAM ARGS`` unchanged (the documented GPU
templates use it for SGLang, vLLM and their routers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from pddbench.harness.engines.install import llama_server, vllm_python
from pddbench.harness.engines.requirements import has_nvidia_gpu
from pddbench.harness.engines.tiny_model import (
    MODEL_NAME,
    TinyModelSpec,
    default_model_dir,
    make_tiny_model,
)

EXIT_REFUSED = 2
ENGINES = ("vllm", "llamacpp", "gpu")


class LaunchError(Exception):
    """Why an engine cannot start (printed as one line, exit status 2)."""


def gpu_refusal(engine: str) -> str | None:
    """The one-line refusal for a GPU-only engine on this machine, or None when it may run."""
    if engine == "gpu" and not has_nvidia_gpu():
        return (
            f"engine {engine} needs an NVIDIA GPU and none is present: this scenario is a "
            "documented template, not runnable on this machine"
        )
    return None


def _model_dir(arg: str | None, vocab_size: int) -> Path:
    if arg:
        return Path(arg).expanduser()
    model, _ = make_tiny_model(default_model_dir(vocab_size), TinyModelSpec(vocab_size=vocab_size))
    return model.root


def vllm_argv(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    python = vllm_python()
    if not python.exists():
        raise LaunchError(
            f"vLLM is not installed in {python.parents[1]}: run `pddbench engines install vllm`"
        )
    model = _model_dir(args.model, args.vocab_size)
    hf = model / "hf" if (model / "hf").is_dir() else model
    argv = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(hf),
        "--served-model-name",
        args.served_name,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--max-model-len",
        str(args.max_model_len),
        "--dtype",
        args.dtype,
    ]
    if args.kv_listen:
        argv += ["--kv-transfer-config", json.dumps(kv_transfer_config(args))]
    return [*argv, *extra]


def kv_transfer_config(args: argparse.Namespace) -> dict[str, object]:
    """vLLM's ``--kv-transfer-config`` for pddbench's KV connector over TCP
    (:mod:`pddbench.harness.engines.kvtcp`): its node listens on ``--kv-listen`` and keeps
    warm connections to each ``--kv-peer``."""
    return {
        "kv_connector": "PddTcpConnector",
        "kv_connector_module_path": "pddbench.harness.engines.kvtcp.connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "listen": args.kv_listen,
            "peers": list(args.kv_peer),
            "streams": args.kv_streams,
        },
    }


def llamacpp_argv(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    binary = llama_server()
    if not binary.exists():
        raise LaunchError(
            f"llama-server is not built in {binary.parents[1]}: "
            "run `pddbench engines install llamacpp`"
        )
    model = _model_dir(args.model, args.vocab_size)
    gguf = model / "tiny-llama.gguf" if model.is_dir() else model
    slots = args.slots
    argv = [
        str(binary),
        "--model",
        str(gguf),
        "--alias",
        args.served_name,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--metrics",
        "--parallel",
        str(slots),
        "--ctx-size",
        str(args.max_model_len * slots),
        "--threads",
        str(args.threads or max(1, os.cpu_count() or 1)),
        "--no-warmup",
    ]
    return [*argv, *extra]


def gpu_argv(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    refusal = gpu_refusal(args.engine)
    if refusal:
        raise LaunchError(refusal)
    if not extra:
        raise LaunchError("launch gpu needs the program to run after --")
    program = shutil.which(extra[0]) or extra[0]
    return [program, *extra[1:]]


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(prog="python -m pddbench.harness.engines.launch")
    p.add_argument("engine", choices=ENGINES)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", help="model folder/file (default: the tiny model in the cache)")
    p.add_argument("--served-name", default=MODEL_NAME)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--max-model-len", type=int, default=32768)
    p.add_argument("--slots", type=int, default=8, help="llama.cpp: parallel slots")
    p.add_argument("--threads", type=int, default=None, help="llama.cpp: CPU threads")
    p.add_argument("--dtype", default="bfloat16", help="vLLM: weights and KV dtype")
    p.add_argument("--kv-listen", help="vLLM: HOST:PORT of pddbench's KV connector node")
    p.add_argument("--kv-peer", action="append", default=[], help="vLLM: a KV peer to keep warm")
    p.add_argument("--kv-streams", type=int, default=2, help="vLLM: KV connections per peer")
    return p.parse_args(argv), extra


def engine_argv(argv: Sequence[str]) -> list[str]:
    args, extra = parse(argv)
    if args.engine == "vllm":
        return vllm_argv(args, extra)
    if args.engine == "llamacpp":
        return llamacpp_argv(args, extra)
    return gpu_argv(args, extra)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cmd = engine_argv(argv)
    except LaunchError as exc:
        print(f"pddbench engine launch: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    if argv[:1] != ["llamacpp"]:  # vLLM (CPU or GPU) loads pddbench's KV connector by path
        root = str(Path(__file__).resolve().parents[3])
        paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    print("exec: " + " ".join(cmd), flush=True)
    try:
        os.execv(cmd[0], cmd)
    except OSError as exc:
        print(f"pddbench engine launch: cannot exec {cmd[0]}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
