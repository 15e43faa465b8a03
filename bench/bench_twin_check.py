"""Twin against emulation: the same ladder point through both backends, side by side.

For each ``--scenario``, runs one ladder point of ``pddbench capacity`` (the main job's
walk: the trace's busiest hour at x10, the rung that ``--start`` offers, 10 s warm-up,
until 400 requests are offered) with ``--backend emulated`` (root) and ``--backend
virtual`` into ``--out``, then prints the figures issue 27's bars compare
(:mod:`pddbench.twin.check`: TTFT P50/P90/P99, TPOT P50/P99, E2E P99, SLA attainment, RLD
share, relayed requests, WAN bytes, MD/D hit rate, the TTFT parts' means) with each
figure's tolerance and verdict. With ``--link-model FILE`` (``pddbench twin calibrate``,
then ``pddbench twin fit-host``) the twin judged is the calibrated one, and the twin of the
hardware (the scenario's configured links, no host costs) is shown beside it;
``--link-model SCENARIO=FILE`` gives one scenario its own file (``pddbench twin
fit-windows`` fits a deployment's own KV connections, which differ between deployments).
``--twin-seeds N`` (default 4) also runs the twin at deployment seeds 1..N (the servers'
draws: MTP acceptance, tokens; the same trace window and plan) and prints each figure's
range over the ensemble: near a pool's saturation, which instance a request lands on
depends on the order of events milliseconds apart, and a figure such as same-dc-pd's TTFT
P90 at its first rung moves by 1.9x between seeds (and by 2x between two emulated runs of
one commit). A figure outside its tolerance but inside that spread is marked ``in spread``:
one run of each backend cannot tell the two apart there. ``--reuse`` keeps point folders
already in ``--out``; ``--emulated DIR --virtual DIR [--uncalibrated DIR] [--seeded DIR
...]`` compares existing capacity (or point) folders instead; ``--main-job DIR`` compares
every system of a main job's ``--out`` folder (its emulated walks against the twin walks it
ran beside them, each point with the check twin's seed spread) and prints each system's
capacity beside the emulated interval. Figures only; no pass/fail exit status.

The calibration, once per machine (root; one emulated replay per scenario, on another
window of the trace than the one checked, e.g. day 30):

    sudo pddbench twin calibrate --scenario pdd --trace jan-feb.parquet --out lm.json
    sudo pddbench replay --trace jan-feb.parquet --scenario same-dc-pd --window 30d/6h \
        --speedup 150 --duration 120s --no-report --out cal
    pddbench twin fit-host cal/*-same-dc-pd-* --trace jan-feb.parquet --link-model lm.json
    cp lm.json lm-pdd.json   # then, per WAN scenario: its own connections' rate
    sudo pddbench replay ... --scenario pdd ... --out cal-pdd
    pddbench twin fit-windows cal-pdd/*-pdd-* --link-model lm-pdd.json

    sudo .venv/bin/python bench/bench_twin_check.py --trace jan-feb.parquet \
        --scenario same-dc-pd --scenario cross-dc-pd --scenario pdd \
        --link-model lm.json --link-model pdd=lm-pdd.json \
        --link-model cross-dc-pd=lm-cross-dc-pd.json --out twin-check
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.config.scenario import scenario_text
from pddbench.harness.experiments.sweep import dump_toml
from pddbench.harness.rundir.main_verdict import MAIN_VERDICT, MainVerdict, read_main_verdict
from pddbench.twin.check import PointRun, compare, load_point, point_folders, render


def seeded_scenario(scenario: str, seed: int, out: Path) -> str:
    """A copy of ``scenario`` (a built-in name or a file) at deployment seed ``seed``,
    written under ``out``; its path."""
    text, _ = scenario_text(scenario)
    data = tomllib.loads(text)
    data.setdefault("deployment", {})["seed"] = seed
    path = out / "scenarios" / f"{Path(scenario).stem}-seed{seed}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_toml(data))
    return str(path)


def run_point(
    trace: Path, scenario: str, backend: str, start: float, out: Path, link_model: Path | None
) -> None:
    cmd = [
        sys.executable, "-m", "pddbench", "capacity", "--trace", str(trace),
        "--scenario", scenario, "--points", "1", "--bisect", "0", "--descend", "0",
        "--start", f"{start:g}", "--backend", backend, "--out", str(out),
    ]  # fmt: skip
    if link_model is not None:
        cmd += ["--link-model", str(link_model)]
    print(f"# {' '.join(cmd[2:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    print(f"#   rc {done.returncode}: {last or done.stderr.strip()[-300:]}", flush=True)


Points = dict[tuple[int, float, float, float], PointRun]


def by_point(root: Path | None) -> Points:
    if root is None:
        return {}
    return {p.key: p for p in map(load_point, point_folders(root))}


def pairs(
    emulated: Path,
    virtual: Path,
    uncalibrated: Path | None = None,
    seeded: list[Path] | None = None,
) -> None:
    spoints = [by_point(f) for f in seeded or []]
    side_by_side(by_point(emulated), by_point(virtual), by_point(uncalibrated), spoints)


def side_by_side(epoints: Points, vpoints: Points, upoints: Points, spoints: list[Points]) -> None:
    for key in sorted(epoints.keys() & vpoints.keys()):
        e, v = epoints[key], vpoints[key]
        print(
            f"\n{e.system}: point {e.index} (x{e.load_scale:g}, trace offset "
            f"{e.trace_start_s / 3600:.2f} h): {len(e.records)} emulated / "
            f"{len(v.records)} virtual requests in the measured window"
        )
        if e.excluded:  # the emulator fell behind: its figures are not a check
            print(f"EMULATED POINT EXCLUDED by the ladder ({e.excluded}): not a valid check")
        ensemble = [p[key] for p in spoints if key in p]
        if ensemble:
            print(f"twin seed ensemble: the twin at {len(ensemble) + 1} deployment seeds")
        print(render(compare(e, v, upoints.get(key), ensemble or None)))
    for key in sorted(epoints.keys() - vpoints.keys()):
        e = epoints[key]
        print(
            f"\n{e.system}: point {e.index} (x{e.load_scale:g}, {e.point_s:g} s measured): "
            "the twin's walk did not run this load over this window; not compared"
        )


def main_verdict_of(root: Path) -> MainVerdict:
    """The main job's verdict in ``root`` (its own file, else a point folder's copy)."""
    if not root.is_dir():
        raise SystemExit(f"{root}: no such folder")
    for path in [root / MAIN_VERDICT, *sorted(root.glob(f"*/{MAIN_VERDICT}"))]:
        try:
            found = read_main_verdict(path)
        except UserError as exc:
            raise SystemExit(str(exc)) from None
        if found is not None:
            return found
    raise SystemExit(f"{root}: no {MAIN_VERDICT} (not a main job's --out folder)")


def main_job(root: Path) -> None:
    """Every system of a main job's ``--out`` folder: each emulated ladder point beside
    the check's twin (``twin-host-<system>/seed0``: this host's costs), the twin of the
    hardware (``twin-<system>/seed0``) and the check twin's other seeds; then each system's
    capacity, the twin's beside the emulated walk's interval."""
    verdict = main_verdict_of(root)
    top = [d for d in sorted(root.iterdir()) if (d / "requests.parquet").exists()]
    emulated = [p for p in map(load_point, top) if p.backend == "emulated"]
    for row in verdict.systems:
        system = row.system
        epoints = {p.key: p for p in emulated if p.system == system}
        host, hardware = root / f"twin-host-{system}", root / f"twin-{system}"
        check = host if (host / "seed0").exists() else hardware
        if not epoints or not (check / "seed0").exists():
            print(f"\n{system}: no emulated walk or no twin walk in {root}; not compared")
            continue
        if check == hardware:
            print(f"\n{system}: no host-fitted twin: compared with the twin of the hardware")
        seeds = sorted(check.glob("seed[1-9]*"), key=lambda d: int(d.name[4:]))
        other = by_point(hardware / "seed0") if check != hardware else {}
        side_by_side(epoints, by_point(check / "seed0"), other, [by_point(d) for d in seeds])
    print(f"\ncapacity (req/s meeting the SLA), {verdict.sla_text}")
    print(f"{'system':14} {'twin (verdict)':36} {'check twin':26} {'emulated':22} agreement")
    for row in verdict.systems:
        print(
            f"{row.system:14} {row.twin_text():36} {row.check_twin_text():26} "
            f"{row.capacity_text():22} {row.agreement}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--scenario", action="append", default=[])
    ap.add_argument("--start", type=float, default=4.0, help="the ladder's --start (x4: rung 1)")
    ap.add_argument("--out", type=Path, default=Path("twin-check"))
    ap.add_argument(
        "--link-model",
        action="append",
        default=[],
        help="the twin's calibration (links, host costs): FILE, or SCENARIO=FILE for one scenario",
    )
    ap.add_argument("--reuse", action="store_true", help="keep points already in --out")
    ap.add_argument("--emulated", type=Path, help="an emulated capacity folder to compare")
    ap.add_argument("--virtual", type=Path, help="... with this virtual one")
    ap.add_argument("--uncalibrated", type=Path, help="... and this uncalibrated virtual one")
    ap.add_argument(
        "--seeded", type=Path, action="append", default=[], help="... and these seeded twins"
    )
    ap.add_argument(
        "--twin-seeds", type=int, default=4, help="also run the twin at seeds 1..N (0: none)"
    )
    ap.add_argument(
        "--main-job", type=Path, help="a main job's --out folder: compare every system in it"
    )
    args = ap.parse_args()
    if args.main_job is not None:
        main_job(args.main_job)
        return 0
    if args.emulated is not None and args.virtual is not None:
        pairs(args.emulated, args.virtual, args.uncalibrated, args.seeded)
        return 0
    if args.trace is None or not args.scenario:
        ap.error("give --trace and --scenario (or --emulated DIR --virtual DIR)")
    models = dict(m.split("=", 1) if "=" in m else ("", m) for m in args.link_model)
    for s in args.scenario:
        tag = f"{Path(s).stem}-x{args.start:g}"  # a scenario file: its name, not its path
        found = models.get(s, models.get(""))
        model = Path(found) if found else None
        runs = {"emulated": (args.out / f"emulated-{tag}", "emulated", None)}
        runs["virtual"] = (args.out / f"virtual-{tag}", "virtual", model)
        if model is not None:
            runs["uncalibrated"] = (args.out / f"uncalibrated-{tag}", "virtual", None)
        for folder, backend, model in runs.values():
            if not (args.reuse and point_folders(folder)):
                run_point(args.trace, s, backend, args.start, folder, model)
        seeded = []
        for k in range(1, args.twin_seeds + 1):
            folder = args.out / f"virtual-seed{k}-{tag}"
            if not (args.reuse and point_folders(folder)):
                variant = seeded_scenario(s, k, args.out)
                run_point(args.trace, variant, "virtual", args.start, folder, model)
            seeded.append(folder)
        uncal = runs["uncalibrated"][0] if "uncalibrated" in runs else None
        pairs(runs["emulated"][0], runs["virtual"][0], uncal, seeded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
