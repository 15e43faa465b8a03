"""The run manifest: written and read by the same class, the JSON on disk keeps its shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions, Selection
from pddbench.harness.rundir.folder import RunPaths, new_run
from pddbench.harness.rundir.manifest import RunManifest, RunStatus
from pddbench.harness.rundir.sections import ReplaySection, ScenarioSection


def test_save_then_load_round_trips_and_writes_only_what_was_set(tmp_path: Path) -> None:
    paths = new_run(tmp_path, "m")
    m = RunManifest.begin(argv=["pddbench", "replay"], run_id=paths.run_id)
    m.scenario = ScenarioSection(name="pdd")
    m.anchor_clock(12.5)
    m.save(paths.root)
    on_disk = json.loads(paths.manifest.read_text())
    assert on_disk["status"] == "running" and on_disk["clock"]["origin_monotonic_s"] == 12.5
    assert "records" not in on_disk and "ended_at" not in on_disk  # never set: not written
    m.finish(RunStatus.COMPLETE, records=3, unreadable_lines=0)
    m.save(paths.root)
    back = RunManifest.load(paths.root)
    assert back == m and back.status is RunStatus.COMPLETE and back.records == 3
    assert json.loads(paths.manifest.read_text()) == back.to_json()


def test_the_replay_section_keeps_its_flat_form_and_reads_back_its_options(
    tmp_path: Path,
) -> None:
    options = ReplayOptions(selection=Selection(speedup=4.0), vocab_size=5000)
    m = RunManifest(run_id="r")
    m.replay = ReplaySection(target="http://x", options=options, plan="3 requests")
    m.save(tmp_path)
    on_disk = json.loads(RunPaths(tmp_path).manifest.read_text())["replay"]
    assert on_disk == {"target": "http://x", "plan": "3 requests", **options.to_json()}
    back = RunManifest.load(tmp_path).replay
    assert back is not None and back.options == options and back.engine is None
    # a section from before the options were recorded, or with options this version
    # cannot read, loads with none and is written back as it was
    for old in ({"target": "http://x"}, {"target": "http://x", "vocab_size": "many"}):
        (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "r", "replay": old}))
        loaded = RunManifest.load(tmp_path)
        assert loaded.replay is not None and loaded.replay.options is None
        assert loaded.to_json()["replay"] == old


def test_unknown_keys_are_kept_verbatim(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"run_id": "r", "future_key": [1, 2]}))
    m = RunManifest.load(tmp_path)
    m.save(tmp_path)
    assert json.loads(RunPaths(tmp_path).manifest.read_text()) == {
        "run_id": "r",
        "future_key": [1, 2],
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "not a run folder"),
        ("{", "cannot read JSON"),
        ("[]", "expected a JSON object"),
        ('{"run_id": "r", "status": "weird"}', "status"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_the_file(
    tmp_path: Path, text: str | None, message: str
) -> None:
    if text is not None:
        (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(UserError, match=message):
        RunManifest.load(tmp_path)
