"""Run folders written by an earlier pddbench still load and report the same.

``tests/rundir_fixture`` holds run folders written by main at aa024d6 (before issue 26
typed the manifest and moved the run path; see its README): a ``pddbench replay`` of the
built-in pdd scenario on loopback, a ``--target`` replay of a reference server, and a
two-point ``pddbench capacity`` walk. ``expected/`` holds the reports that code rendered
from them. A change to the run-folder contract or to the report that alters any of them
fails here; a deliberate report change regenerates ``expected/`` with :func:`render_all`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pddbench.harness.report.model import build_report
from pddbench.harness.report.write import Format, render
from pddbench.harness.rundir.manifest import RunManifest

FIXTURE = Path(__file__).resolve().parents[1] / "rundir_fixture"
EXPECTED = FIXTURE / "expected"
# relative to FIXTURE (the reports name the run folders as given)
REPLAYS = sorted(p.relative_to(FIXTURE) for p in (FIXTURE / "replay").iterdir())
POINTS = sorted(p.relative_to(FIXTURE) for p in (FIXTURE / "capacity").glob("*-x*") if p.is_dir())
RUNS = [*REPLAYS, *POINTS]
GENERATED_AT = "2026-12-04 00:56 UTC"  # when expected/ was rendered (a report says when)


def render_all(out: Path) -> dict[str, str]:
    """Every report of the fixture, by file name, run from ``FIXTURE`` (the working folder
    the run paths are relative to; Markdown figures go beside ``out``)."""
    reports = {
        "replay": build_report(REPLAYS),
        "capacity": build_report(POINTS, capacity_files=[Path("capacity/capacity.json")]),
    }
    texts: dict[str, str] = {}
    for name, report in reports.items():
        report = dataclasses.replace(report, generated_at=GENERATED_AT)
        for fmt in (Format.MD, Format.JSON):
            path = out / f"{name}.{fmt.value}"
            texts[path.name] = render(report, fmt, path)
    return texts


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_an_old_manifest_loads_and_saves_unchanged(run: Path, tmp_path: Path) -> None:
    run = FIXTURE / run
    raw = json.loads((run / "manifest.json").read_text())
    manifest = RunManifest.load(run)
    assert manifest.to_json() == raw
    manifest.save(tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text()) == raw


def test_old_run_folders_render_the_same_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(FIXTURE)
    texts = render_all(tmp_path)
    assert sorted(texts) == sorted(p.name for p in EXPECTED.iterdir())
    for name, text in texts.items():
        assert text == (EXPECTED / name).read_text(), name
