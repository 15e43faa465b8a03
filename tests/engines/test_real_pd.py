"""Real PD and PDD on real engines: vLLM CPU instances that move real KV over TCP.

One replay of the engine-ci trace (41 requests, 7 agentic sessions) through the three
real-engine deployments — ``vllm-cpu-same-dc-pd``, ``vllm-cpu-cross-dc-pd`` and
``vllm-cpu-pdd`` — over the emulated WAN where this machine can emulate it (root), then
the checks a PD engineer makes: every request completes; PDD takes both pipelines and
hands off with Extend-Decode; the WAN bytes the emulated link carried in its bulk class
agree with the connector's own count; a later turn ships only its suffix; then, on a
fresh deployment of each, greedy decoding through the deployment equals a colocated
instance's for the same prompts; and MD killed mid-transfer fails only what it held.

Skip with ``PDDBENCH_SKIP_REAL_ENGINES=1`` or a ``PDDBENCH_REAL_ENGINES`` without vllm.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.engines.greedy import compare
from pddbench.harness.engines.install import install
from pddbench.harness.jobs.greedy import greedy_cases
from tests.engines.conftest import PDDBENCH, ROOT

SCENARIOS = ("vllm-cpu-same-dc-pd", "vllm-cpu-cross-dc-pd", "vllm-cpu-pdd")
KV_BYTES_PER_TOKEN = 2048  # the tiny model in fp32: 2 layers x 2 heads x 128 x 4 bytes
BLOCK = 128


def _emulation() -> bool:
    if os.geteuid() != 0:
        return False
    from pddbench.harness.deploy.systems import emulation_problem

    return emulation_problem() is None


EMULATED = _emulation()

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        os.environ.get("PDDBENCH_SKIP_REAL_ENGINES", "") not in ("", "0"),
        reason="PDDBENCH_SKIP_REAL_ENGINES is set",
    ),
    pytest.mark.skipif(
        "vllm" not in os.environ.get("PDDBENCH_REAL_ENGINES", "vllm"),
        reason="vllm not in PDDBENCH_REAL_ENGINES",
    ),
]


@dataclass
class PdRun:
    scenario: str
    folder: Path
    records: pd.DataFrame
    manifest: dict


@pytest.fixture(scope="session")
def pd_runs(ci_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, PdRun]:
    install("vllm", log=lambda line: print(f"[vllm] {line}", flush=True))
    out = tmp_path_factory.mktemp("pd-out")
    argv = [*PDDBENCH, "replay", "--trace", str(ci_trace), "--speedup", "4", "--out", str(out)]
    for name in SCENARIOS:
        argv += ["--scenario", name]
    if not EMULATED:
        argv.append("--no-emulation")
    start = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=2400)
    print(
        f"[real PD] replay of 3 deployments (start-up included): {time.monotonic() - start:.0f} s"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    runs = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        manifest = json.loads((folder / "manifest.json").read_text())
        name = manifest["scenario"]["name"]
        records = pq.read_table(folder / "requests.parquet").to_pandas()
        runs[name] = PdRun(name, folder, records, manifest)
    assert set(runs) == set(SCENARIOS), sorted(runs)
    assert list(out.glob("report-*.html")), "no comparison report"
    return runs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_request_completes(pd_runs: dict[str, PdRun], scenario: str) -> None:
    df = pd_runs[scenario].records
    assert len(df) == 41 and (df.status == "ok").all(), df[df.status != "ok"].error_message
    assert (df.output_tokens == df.expected_output_tokens).all()
    # the front door's story: the harness reads the TTFT decomposition from it
    assert df.ttft_prefill_s.notna().all() and df.ttft_first_decode_s.notna().all()
    # P's own prefix cache, as vLLM reports it, is the trace's at 128-token blocks
    equal = df.cached_tokens_reported == df.cached_tokens_theoretical
    assert equal.mean() >= 0.95, df[~equal][["cached_tokens_theoretical", "cached_tokens_reported"]]


def test_pdd_takes_both_pipelines_and_hands_off_with_extend_decode(
    pd_runs: dict[str, PdRun],
) -> None:
    df = pd_runs["vllm-cpu-pdd"].records
    counts = df.pipeline.value_counts().to_dict()
    print(f"[vllm-cpu-pdd] pipelines {counts}; relay tokens {df.relay_tokens.sum()}")
    assert counts.get("P->MD", 0) >= 1 and counts.get("P->RLD->MD", 0) >= 1, counts
    if EMULATED:  # on loopback MD holds the KV before RLD's first token: no seam to cross
        handed = df[(df.handoff_mode == "extend-decode") & (df.relay_tokens > 0)]
        assert len(handed) >= 1, df[["pipeline", "relay_tokens", "handoff_mode"]]
        assert (handed.first_token_origin == "RLD").all()


# One packet's headers as the egress qdisc counts them: Ethernet 14 + IPv4 20 + TCP 20 +
# the timestamps option 12 (on by default).
HEADERS = 66


@pytest.mark.parametrize(
    ("scenario", "far"), [("vllm-cpu-cross-dc-pd", "d0"), ("vllm-cpu-pdd", "m0")]
)
def test_link_and_connector_agree_on_wan_bytes(
    pd_runs: dict[str, PdRun], scenario: str, far: str
) -> None:
    """The TCP payload the WAN's bulk class carried A->B (its bytes less one set of headers
    per packet) against the bytes the far side's connector received (whole frames)."""
    if not EMULATED:
        pytest.skip("no emulated WAN here (needs root and an emulation backend)")
    run = pd_runs[scenario]
    link = run.manifest["deployment"]["wan_bytes"]["wan:a_to_b"]  # dc-a (P) -> dc-b
    payload = link["bulk"] - HEADERS * link["bulk_packets"]
    sm = pq.read_table(run.folder / "server_metrics.parquet").to_pandas()
    got = sm[(sm.metric == "kv_bytes_received_total") & sm.labels.str.contains(f'"{far}"')]
    connector = float(got.sort_values("t_s").value.iloc[-1])
    kv = float(run.records.wan_bytes.sum())  # the KV blocks alone (the stories' count)
    ratio = payload / connector
    print(
        f"[{scenario}] WAN bulk A->B {link['bulk']:,} B in {link['bulk_packets']:,} packets: "
        f"TCP payload {payload:,} B; connector frames received at {far} {connector:,.0f} B "
        f"(KV blocks {kv:,.0f} B): {ratio:.4f}"
    )
    assert abs(ratio - 1.0) <= 0.05
    assert kv <= connector <= 1.05 * kv  # framing and token ids: a few percent at most


def test_a_later_turn_ships_only_its_suffix(pd_runs: dict[str, PdRun]) -> None:
    df = pd_runs["vllm-cpu-cross-dc-pd"].records
    later = df[df.turn_index > 0]
    assert len(later) >= 10
    # what D's store lacks: the new tokens, and the block the last turn left partial
    uncached = later.input_tokens - later.cached_tokens_theoretical
    bound = (uncached + 2 * BLOCK) * KV_BYTES_PER_TOKEN
    whole = later.input_tokens * KV_BYTES_PER_TOKEN
    assert (later.wan_bytes <= bound).all(), later[["input_tokens", "wan_bytes"]]
    assert later.wan_bytes.sum() < 0.2 * whole.sum()
    first = df[df.turn_index == 0]
    blocks = first.input_tokens.map(lambda n: math.ceil(n / BLOCK))
    assert (first.wan_bytes <= blocks * BLOCK * KV_BYTES_PER_TOKEN).all()


@pytest.mark.parametrize("name", SCENARIOS)
def test_greedy_decoding_through_the_deployment_equals_a_colocated_instance(
    ci_trace: Path, tmp_path: Path, name: str
) -> None:
    from pddbench.harness.deploy.systems import deploy
    from pddbench.harness.drive.netns import run_in_client_netns
    from pddbench.harness.rundir.folder import RunPaths

    install("vllm", log=lambda line: print(f"[vllm] {line}", flush=True))
    scenario = load_scenario(name)
    cases = greedy_cases(ci_trace, 20, 24, 32000, 1000)
    paths = RunPaths(tmp_path / "greedy")
    paths.logs.mkdir(parents=True)
    with deploy(scenario, paths, emulate=EMULATED, check_probes=False) as (info, ns, ready):

        def client():  # type: ignore[no-untyped-def]
            ready()
            front, ref = info.front_door, info.instances["p0"]
            return asyncio.run(compare(name, front, ref, "pddbench-tiny-llama", cases))

        summary = run_in_client_netns(ns, client)
    for line in summary.lines():
        print(line)
    assert len(summary.results) == 20
    assert summary.share >= 0.95


def test_md_killed_mid_transfer_fails_only_its_requests_and_pdd_carries_on(
    ci_trace: Path, tmp_path: Path
) -> None:
    """MD dies while a KV transfer to it is arriving: every request of the replay has a
    record, none runs past the request limit, the requests MD held fail with a class, and
    the front door keeps serving (P->RLD while no MD is up)."""
    if not EMULATED:
        pytest.skip("needs the emulated WAN (root): on loopback a transfer is over in ms")
    import sys

    from pddbench.harness.deploy.faults import kill_tree
    from pddbench.harness.deploy.systems import deploy
    from pddbench.harness.drive.netns import run_in_client_netns
    from pddbench.harness.engines.kvtcp.node import ask
    from pddbench.harness.engines.kvtcp.wire import Kind
    from pddbench.harness.rundir.folder import RunPaths
    from pddbench.netem import nsutil

    install("vllm", log=lambda line: print(f"[vllm] {line}", flush=True))
    scenario = load_scenario("vllm-cpu-pdd")
    paths = RunPaths(tmp_path / "deploy")
    paths.logs.mkdir(parents=True)
    out = tmp_path / "runs"
    limit_s = 60.0
    with deploy(scenario, paths, emulate=True, check_probes=False) as (info, ns, ready):
        assert ns is not None
        run_in_client_netns(ns, ready)
        host = info.instances["m0"].removeprefix("http://").rpartition(":")[0]
        md_node = f"{host}:19463"
        argv = [
            "nsenter", f"--net={nsutil.netns_path(ns)}", sys.executable, "-m", "pddbench",
            "replay", "--trace", str(ci_trace), "--target", info.front_door, "--speedup", "4",
            "--timeout", f"{limit_s:g}s", "--label", "md-killed", "--out", str(out),
        ]  # fmt: skip
        replay = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        killed_at = None
        deadline = time.monotonic() + 120
        while killed_at is None and time.monotonic() < deadline:
            stats = nsutil.run_in_netns(ns, ask, md_node, Kind.STATS, {}, b"", 2.0).header
            if stats["transfers_received"] >= 3 and stats["receiving"] >= 1:
                kill_tree(info.pids["m0"])  # MD's server, engine core and worker
                killed_at = time.time()
            else:
                time.sleep(0.005)
        assert killed_at is not None, "no transfer to MD was seen arriving"
        _, err = replay.communicate(timeout=900)
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    df = pq.read_table(folder / "requests.parquet").to_pandas()
    origin = pd.Timestamp(manifest["clock"]["origin_wall"]).timestamp()
    kill_s = killed_at - origin
    print(f"[MD killed at {kill_s:.1f} s] {df.status.value_counts().to_dict()}")
    print(df[["actual_send_s", "pipeline", "status", "error_class", "error_message"]].to_string())
    assert len(df) == 41, err.decode()[-2000:]  # every request has a record
    assert ((df.end_s - df.actual_send_s) <= limit_s + 5).all()  # nothing hung past the limit
    failed = df[df.status != "ok"]
    assert len(failed) >= 1 and failed.error_class.notna().all()
    assert (failed.actual_send_s <= kill_s + 2).all()  # only those MD held, none after
    after = df[df.actual_send_s > kill_s + 1.0]
    carried = after[(after.status == "ok") & (after.pipeline == "P->RLD")]
    assert len(carried) >= 1, "the front door did not carry on without MD"


OUTAGE = """
[[network.schedule.events]]  # the WAN down for 5 s while requests and KV are crossing it
at_s = 10.0
link = "wan"
changes = { up = false }
[[network.schedule.events]]
at_s = 15.0
link = "wan"
changes = { up = true }
"""


def test_wan_down_for_5_s_delays_requests_but_loses_none(ci_trace: Path, tmp_path: Path) -> None:
    """Cross-DC PD with the WAN down 5 s mid-run: every request has a record, none outlives
    the request limit, a failure (if any) has a class, requests caught by the outage finish
    after it, and the report draws the outage."""
    if not EMULATED:
        pytest.skip("needs the emulated WAN (root)")
    install("vllm", log=lambda line: print(f"[vllm] {line}", flush=True))
    text = (ROOT / "pddbench/scenarios/vllm-cpu-cross-dc-pd.toml").read_text()
    scenario = tmp_path / "wan-down.toml"
    scenario.write_text(text.replace('name = "vllm-cpu-cross-dc-pd"', 'name = "wan-down"') + OUTAGE)
    out = tmp_path / "out"
    limit_s = 60.0
    res = subprocess.run(
        [*PDDBENCH, "replay", "--trace", str(ci_trace), "--scenario", str(scenario),
         "--speedup", "4", "--timeout", f"{limit_s:g}s", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    df = pq.read_table(folder / "requests.parquet").to_pandas()
    links = pq.read_table(folder / "links.parquet").to_pandas()
    changes = links[links.kind == "change"]
    down = changes[changes.up == False]  # noqa: E712 - a column of booleans
    print(f"[WAN down] {df.status.value_counts().to_dict()}; changes:\n{changes[['t_mono', 'up']]}")
    assert len(df) == 41, res.stderr[-2000:]
    assert len(down) >= 1
    assert ((df.end_s - df.actual_send_s) <= limit_s + 5).all()
    failed = df[df.status != "ok"]
    assert failed.error_class.notna().all()
    origin = json.loads((folder / "manifest.json").read_text())["clock"]["origin_monotonic_s"]
    t_down = float(down.t_mono.min()) - origin
    caught = df[(df.status == "ok") & (df.actual_send_s < t_down + 5) & (df.end_s > t_down + 5)]
    assert len(caught) >= 1, "no request spanned the outage and finished after it"
    page = next(out.glob("report-*.html")).read_text()
    assert "the direction was down" in page
