"""Deployment configs (built-ins, validation errors) and the public API's request checks."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest

from pddbench.errors import UserError
from pddbench.servers.api import BadRequest, ChunkWriter, parse_request
from pddbench.servers.config import builtin_deployments, load_deployment, parse_deployment

from .helpers import deployment


def test_builtin_deployments_load_and_use_distinct_loopback_ports() -> None:
    assert {"colocated", "cross-dc-pd", "pdd", "same-dc-pd"} <= set(builtin_deployments())
    for name in builtin_deployments():
        dep = load_deployment(name)
        binds = [i.bind for i in dep.instances]
        assert len(set(binds)) == len(binds)
        assert all(b.startswith("127.0.0.1:") for b in binds)
        assert dep.router.address == "127.0.0.1:8000"
    pdd = load_deployment("pdd")
    roles = {i.role.value for i in pdd.instances}
    assert roles == {"router", "prefill", "relay-decode", "main-decode"}
    assert {i.datacenter for i in pdd.instances if i.role.value == "main-decode"} == {"dc-b"}
    shifted = pdd.shifted_ports(100)
    assert shifted.router.address == "127.0.0.1:8100"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["instances"].pop(0), "exactly one router"),
        (lambda d: d["instances"][1].update(role="decode"), "needs roles: colocated"),
        (lambda d: d["instances"][1].update(hardware="abacus"), "unknown hardware profile"),
        (lambda d: d["instances"][1].update(address="nowhere"), "host:port"),
        (lambda d: d["instances"][1].update(id="router"), "duplicate instance ids"),
        (lambda d: d.update(byte_scale=0), "byte_scale"),
        (lambda d: d["instances"][1].update(hardware="h800-sxm", chips=4), "do not fit"),
    ],
)
def test_invalid_deployments_give_one_clear_line(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    d = deployment("colocated", {"colocated": 1})
    mutate(d)
    with pytest.raises(UserError, match=message):
        parse_deployment(d, "test.toml")


def test_load_deployment_from_file_and_unknown_name(tmp_path: Path) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps(deployment("colocated", {"colocated": 1})))
    assert load_deployment(str(f)).architecture.value == "colocated"
    with pytest.raises(UserError, match="not a built-in"):
        load_deployment("nope")


def test_parse_request_defaults_and_checks() -> None:
    r = parse_request({"prompt": [1, 2, 3]}, max_context=100, default_model="m")
    assert isinstance(r.prompt, array) and list(r.prompt) == [1, 2, 3]
    assert (r.max_tokens, r.min_tokens, r.stream, r.ignore_eos, r.model) == (
        16,
        0,
        False,
        False,
        "m",
    )
    r = parse_request(
        {
            "prompt": [7],
            "max_tokens": 5,
            "min_tokens": 5,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "seed": 9,
            "temperature": 0.0,
            "return_token_ids": True,
            "model": "x",
        },
        max_context=100,
        default_model="m",
    )
    assert r.include_usage and r.seed == 9 and r.model == "x"
    with pytest.raises(BadRequest, match="exceeds the model's context"):
        parse_request({"prompt": [1] * 90, "max_tokens": 20}, max_context=100, default_model="m")
    with pytest.raises(BadRequest, match="`n` must be 1"):
        parse_request({"prompt": [1], "n": 2}, max_context=100, default_model="m")


def test_chunk_shapes_are_openai_completions_with_token_ids() -> None:
    w = ChunkWriter("r1", "model-x")
    raw = w.tokens([5, 6], None)
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    obj = json.loads(raw[6:])
    assert obj["id"] == "cmpl-r1" and obj["object"] == "text_completion"
    assert obj["choices"][0] == {
        "index": 0,
        "text": " 5 6",
        "token_ids": [5, 6],
        "logprobs": None,
        "finish_reason": None,
    }
    last = json.loads(w.tokens([7], "length")[6:])
    assert last["choices"][0]["finish_reason"] == "length"
    final = w.final({"pipeline": "P->MD"}, {"prompt_tokens": 3})
    head, done = final.split(b"\n\n", 1)
    assert done == b"data: [DONE]\n\n"
    assert (
        json.loads(head[6:])["choices"] == [] and json.loads(head[6:])["pdd"]["pipeline"] == "P->MD"
    )


def test_every_builtin_reference_instance_states_its_attention_dtype() -> None:
    import tomllib
    from importlib import resources

    from pddbench.servers.config import DeploymentConfig

    seen = 0
    for f in resources.files("pddbench.scenarios").iterdir():
        if not f.name.endswith(".toml"):
            continue
        raw = tomllib.loads(f.read_text("utf-8"))
        if "deployment" not in raw:
            continue  # a real-engine template: its engines' own flags choose
        insts = [
            {**i, "address": f"127.0.0.1:{9000 + k}"}
            for k, i in enumerate(raw["deployment"]["instances"])
        ]
        dep = DeploymentConfig.model_validate(
            {"name": f.name, **raw["deployment"], "instances": insts}
        )
        for inst, raw_inst in zip(dep.instances, raw["deployment"]["instances"], strict=True):
            if inst.role.value == "router":
                continue
            assert "attention_dtype" in raw_inst, (f.name, inst.id)
            # FP8 where the calibration source ran FP8: Ant Group's H20 decode; BF16 on H800
            assert inst.attention_dtype == ("fp8" if inst.hardware == "h20" else "bf16")
            assert dep.machine(inst).attention_dtype == inst.attention_dtype
            seen += 1
    assert seen >= 30
