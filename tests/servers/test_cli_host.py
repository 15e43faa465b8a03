"""The standalone entry points: ``serve`` (click) and ``python -m pddbench.servers.host``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest

from pddbench.servers.tokens import output_token

from .helpers import free_port_block

pytestmark = pytest.mark.timeout(60)


def _post(url: str, body: dict[str, object], rid: str) -> list[str]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": rid},
    )
    with urllib.request.urlopen(req, timeout=20) as r:
        return [line.decode().strip() for line in r if line.strip()]


def test_serve_runs_a_builtin_deployment_until_sigint() -> None:
    port = free_port_block(6)
    code = "from pddbench.servers.cli import serve; serve()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--scenario", "pdd", "--port", str(port), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}", proc.stderr.read() if proc.stderr else ""
        lines = _post(
            url,
            {"prompt": list(range(3000)), "max_tokens": 8, "stream": True, "ignore_eos": True},
            "cli1",
        )
        ids = [t for ln in lines[:-2] for t in json.loads(ln[6:])["choices"][0]["token_ids"]]
        assert ids == [output_token(0, "cli1", i, 163840) for i in range(8)]
        assert lines[-1] == "data: [DONE]"
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'pdd_requests_total{instance="router",role="router",pipeline="P->MD"} 1' in text
        assert "pdd_event_loop_lag_seconds_bucket" in text
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_host_entry_point_refuses_bad_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "bad.json"
    cfg.write_text(
        json.dumps(
            {"deployment": {"name": "x", "architecture": "pdd", "instances": []}, "serve": ["p0"]}
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "invalid deployment" in r.stderr


def test_host_entry_point_refuses_bad_realtime_priority(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "unused.json"
    cfg.write_text("{}")
    r = subprocess.run(
        [sys.executable, "-m", "pddbench.servers.host", "--config", str(cfg), "--realtime", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "pddbench-host: --realtime must be between 1 and 99"
