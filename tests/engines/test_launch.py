"""The engine launcher's commands and refusals, the install stamps, and the GPU templates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pddbench.errors import UserError
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.engines.cache import CACHE_ENV, stamp_matches, write_stamp
from pddbench.harness.engines.install import install, llama_server, vllm_python
from pddbench.harness.engines.launch import LaunchError, engine_argv
from pddbench.harness.engines.requirements import check_runnable, has_nvidia_gpu

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-m", "pddbench.harness.engines.launch"]
GPU_TEMPLATES = ("sglang-pd-gpu", "vllm-pd-gpu", "pdd-gpu")
no_gpu = pytest.mark.skipif(has_nvidia_gpu(), reason="this machine has a GPU")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_install(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


def test_missing_engines_say_how_to_install(cache: Path) -> None:
    with pytest.raises(LaunchError, match="pddbench engines install vllm"):
        engine_argv(["vllm", "--port", "9"])
    with pytest.raises(LaunchError, match="pddbench engines install llamacpp"):
        engine_argv(["llamacpp", "--port", "9"])


def test_vllm_and_llamacpp_commands_use_the_cache_and_the_tiny_model(cache: Path) -> None:
    _fake_install(vllm_python())
    _fake_install(llama_server())
    model = cache / "m"
    (model / "hf").mkdir(parents=True)
    argv = engine_argv(["vllm", "--host", "198.18.1.10", "--port", "18431", "--model", str(model),
                        "--", "--max-num-seqs", "4"])  # fmt: skip
    assert argv[:3] == [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server"]
    for flag in ("--enable-prefix-caching", "--enable-prompt-tokens-details"):
        assert flag in argv
    assert argv[argv.index("--model") + 1] == str(model / "hf")
    assert argv[argv.index("--host") + 1] == "198.18.1.10"
    assert argv[-2:] == ["--max-num-seqs", "4"]
    argv = engine_argv(["llamacpp", "--port", "18432", "--model", str(model), "--slots", "4",
                        "--max-model-len", "1000"])  # fmt: skip
    assert argv[0] == str(llama_server()) and "--metrics" in argv
    assert argv[argv.index("--ctx-size") + 1] == "4000"
    assert argv[argv.index("--model") + 1] == str(model / "tiny-llama.gguf")


@no_gpu
def test_gpu_engines_refuse_in_one_line_without_a_gpu() -> None:
    res = subprocess.run(
        [*LAUNCH, "gpu", "--", "python3", "-m", "sglang.launch_server"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs an NVIDIA GPU" in lines[0] and "not runnable" in lines[0]


@no_gpu
@pytest.mark.parametrize("name", GPU_TEMPLATES)
def test_gpu_templates_load_and_are_refused_before_deploying(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.requires == ["gpu"]
    assert "not runnable here" in scenario.description
    assert scenario.network_config().links  # a WAN between the two datacenters
    with pytest.raises(UserError, match=f"scenario {name} requires gpu") as err:
        check_runnable(scenario.name, scenario.requires)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["vllm-cpu-tiny", "llamacpp-tiny"])
def test_cpu_templates_are_runnable_here(name: str) -> None:
    scenario = load_scenario(name)
    check_runnable(scenario.name, scenario.requires)
    assert scenario.emulation_scale == 1.0 and scenario.client.model == "pddbench-tiny-llama"


def test_stamps_and_unknown_engines(tmp_path: Path) -> None:
    write_stamp(tmp_path, {"engine": "vllm", "version": "1"})
    assert stamp_matches(tmp_path, {"engine": "vllm"})
    assert not stamp_matches(tmp_path, {"engine": "vllm", "version": "2"})
    assert not stamp_matches(tmp_path / "nowhere", {"engine": "vllm"})
    with pytest.raises(UserError, match="unknown engine 'sglang'"):
        install("sglang", tmp_path)
