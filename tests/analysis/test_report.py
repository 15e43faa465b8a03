"""The comparison report: every section present, every figure a valid embedded PNG,
text escaped, no scripts or network, Markdown and JSON forms, the CLI."""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from pddbench.harness.analysis.synthetic import SynthRun
from pddbench.harness.cli.report import report_command
from pddbench.harness.report.model import SECTIONS, build_report
from pddbench.harness.report.render_check import check_render, find_chromium
from pddbench.harness.report.write import Format, render, write_report
from tests.analysis.runs import manifest, rows_table, write_synth, write_table

FIGURE_SECTIONS = (
    "ttft-cdf",
    "latency-percentiles",
    "ttft-by-hit-bin",
    "load",
    "bcr",
    "bathtub",
    "hit-bins-over-time",
    "handoff",
    "wan",
    "sessions",
)


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[dict[str, str | None]] = []
        self.sections: list[str] = []
        self.section_imgs: dict[str, int] = {}
        self.tags: set[str] = set()
        self._section: str | None = None
        self.attrs_seen: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        a = dict(attrs)
        self.attrs_seen.extend(attrs)
        if tag == "section":
            self._section = a.get("id")
            self.sections.append(str(self._section))
        if tag == "img":
            self.imgs.append(a)
            if self._section:
                self.section_imgs[self._section] = self.section_imgs.get(self._section, 0) + 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    specs = [
        ("same-dc", SynthRun(system="same-dc-pd", requests=3000, seed=1)),
        ("cross-dc", SynthRun(system="cross-dc-pd", requests=3000, seed=1)),
        ("pdd", SynthRun(system="pdd", requests=3000, seed=1, token_times_share=0.2)),
        ("pdd-low", SynthRun(system="pdd", requests=1500, seed=2, load_scale=0.5)),
        ("pdd-high", SynthRun(system="pdd", requests=1500, seed=3, load_scale=1.6)),
    ]
    return [write_synth(root / name, spec) for name, spec in specs]


@pytest.fixture(scope="module")
def html(runs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("out") / "report.html"
    write_report(runs, out, json_out=out.with_suffix(".json"))
    return out.read_text(encoding="utf-8")


def test_every_section_exists_and_every_img_is_a_png(html: str) -> None:
    page = Page()
    page.feed(html)
    assert page.sections == [sid for sid, _ in SECTIONS]
    assert page.imgs, "no figures"
    for img in page.imgs:
        src = str(img.get("src"))
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            assert im.size[0] >= 600 and im.size[1] >= 200
        assert img.get("alt")
    for sid in FIGURE_SECTIONS:
        assert page.section_imgs.get(sid, 0) >= 1, f"section {sid} has no figure"


def test_self_contained_no_scripts_no_network(html: str) -> None:
    page = Page()
    page.feed(html)
    assert "script" not in page.tags
    for name, value in page.attrs_seen:
        if name in ("src", "href") and value:
            assert not re.match(r"^(https?:)?//", value), value
    assert "@import" not in html and "url(" not in html


def test_headline_has_deltas_against_the_baseline(html: str) -> None:
    table = html[html.index('id="headline-table"') :]
    table = table[: table.index("</table>")]
    assert "baseline" in table
    assert 'class="worse num"' in table and 'class="better num"' in table
    assert "TTFT P99 (ms)" in table and "SLA goodput (req/s)" in table


def test_json_report(runs: list[Path], tmp_path: Path) -> None:
    res = CliRunner().invoke(
        report_command, [*map(str, runs[:3]), "--json", "-o", "-", "--baseline", "cross-dc-pd"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["format"] == "pddbench.report"
    assert data["baseline"] == "cross-dc-pd"  # distinct scenarios: runs are labelled by them
    pdd = next(r for r in data["runs"] if r["scenario"] == "pdd")
    assert pdd["metrics"]["ttft"]["stats"]["p99"] > 0
    assert {b["group"] for b in pdd["breakdowns"]["hit_bin"]} >= {"0-90%", "99-100%"}
    costs = {c["label"]: c for c in data["costs"]}
    assert costs["pdd"]["cost_change"] == pytest.approx((43 + 32 * 1.2 + 0.3) / 81.7 - 1)
    assert data["headline"]["pdd"]["ttft.p99"]["verdict"] == "better"


def test_markdown_report_writes_figures(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    write_report(runs[:2], out, fmt=Format.MD)
    text = out.read_text()
    for _, title in SECTIONS:
        assert f"## {title}" in text
    figs = list((tmp_path / "r_figures").glob("*.png"))
    assert figs and all(f"r_figures/{f.name}" in text for f in figs)


def test_cli_sla_override_and_errors(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "x.html"
    res = CliRunner().invoke(
        report_command,
        [str(runs[2]), "-o", str(out), "--sla", "ttft=1.5,target=90", "--percentiles", "95"],
    )
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "TTFT &lt;= 1.5 s" in text and "target 90 %" in text
    assert "TTFT P95 (ms)" in text
    bad = CliRunner().invoke(report_command, [str(tmp_path / "missing")])
    assert "no such run folder" in str(bad.exception)
    bad = CliRunner().invoke(report_command, [str(runs[0]), "--baseline", "nope"])
    assert "matches no run" in str(bad.exception)


def test_untrusted_text_is_escaped_and_odd_runs_do_not_crash(tmp_path: Path) -> None:
    evil = "<img src=x onerror=alert(1)>&"
    m = manifest("evil-run", scenario=evil)
    m.links = [{"link": "<b>wan</b>", "rtt_p50_ms": 20.0}]
    row = dict(
        request_id="a",
        session_id="s",
        turn_index=0,
        intended_send_s=0.0,
        status="error",
        error_class=evil,
    )
    write_table(tmp_path / "evil", rows_table([row]), m)
    write_table(tmp_path / "empty", rows_table([]), manifest("empty"))
    report = build_report([tmp_path / "evil", tmp_path / "empty"])
    assert report.baseline.run_id == "evil-run" and report.baseline.label == evil
    out = tmp_path / "r.html"
    write_report([tmp_path / "evil", tmp_path / "empty"], out)
    text = out.read_text()
    assert evil not in text and "&lt;img src=x onerror=alert(1)&gt;&amp;" in text
    assert "&lt;b&gt;wan&lt;/b&gt;" in text
    assert text.count("Not available") >= 8  # no figure can be drawn from these runs
    page = Page()
    page.feed(text)
    assert page.sections == [sid for sid, _ in SECTIONS]
    data = json.loads(render(report, Format.JSON, out))  # no NaN leaks into strict JSON
    assert data["runs"][1]["metrics"]["goodput"]["value"] is None


@pytest.mark.skipif(find_chromium() is None, reason="chromium not installed")
def test_renders_in_headless_chromium(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_report(runs[:3], out)
    res = check_render(out)
    assert res.ok and res.sections == len(SECTIONS)
    broken = tmp_path / "broken.html"
    broken.write_text(
        out.read_text().replace("data:image/png;base64,iVBOR", "data:image/png;base64,XXXX", 1)
    )
    assert not check_render(broken).ok


def test_capacity_curve_file_is_drawn(runs: list[Path], tmp_path: Path) -> None:
    from pddbench.harness.plan.ladder import LadderSearch, PointMeasure
    from pddbench.harness.plan.ladder_points import LadderSettings
    from pddbench.harness.report.figures_system import load_curves

    search = LadderSearch(LadderSettings(), target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    for met in (500, 500, 480):
        w = search.next_window()
        assert w is not None
        search.record(PointMeasure(w, 500, met, {"ttft": met}, 3, 60.0, 500 / 60.0))
    path = tmp_path / "capacity.json"
    path.write_text(search.verdict("pdd").model_dump_json())
    report = build_report(runs[2:3], capacity_files=[path])
    assert report.load == {} and len(report.capacity) == 1
    assert report.capacity[0].capacity_load_scale == 1.5 and len(report.capacity[0].points) == 3
    fig = load_curves(report)
    assert fig is not None and fig.png.startswith(b"\x89PNG")
