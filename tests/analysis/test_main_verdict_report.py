"""The report opens with the main job's verdict when the run folders carry one.

Over the old run-folder fixture (``tests/rundir_fixture``, the two capacity points) with a
``main_verdict.json`` written into each folder, as the main job does: the HTML, Markdown
and JSON carry the sentence and every field of the table, above everything else; in
headless Chromium the sentence is on the first screen. Also the sentence itself
(:meth:`MainVerdict.sentence`) and the loading errors.
"""

from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path

import pytest
from PIL import Image

from pddbench.errors import UserError
from pddbench.harness.report.markdown import _md
from pddbench.harness.report.model import build_report
from pddbench.harness.report.render_check import VIEWPORT, check_render, find_chromium
from pddbench.harness.report.write import Format, render, write_report
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.main_verdict import Agreement, MainVerdict, SystemVerdict

FIXTURE = Path(__file__).resolve().parents[1] / "rundir_fixture" / "capacity"
POINTS = sorted(p for p in FIXTURE.glob("*-x*") if p.is_dir())
SLA_TEXT = "TTFT <= 5 s, TPOT <= 30 ms, 99 % of requests"

Interval = tuple[float, float | None, float | None]  # value, low, high
FIELDS = (  # measured()'s arguments in order, flattened
    *("system", "deployment", "cost_text", "cost"),
    *("twin_capacity", "twin_low", "twin_high", "emulated_capacity", "emulated_low"),
    *("emulated_high", "agreement", "agreement_text", "bcr", "bcr_ratio", "bcr_ratio_low"),
    *("bcr_ratio_high", "binding", "binding_detail"),
)


def measured(
    names: tuple[str, str, str],  # system, deployment, cost text
    cost: float,
    capacities: tuple[Interval, Interval],  # the twin's, the emulated
    agreement: tuple[Agreement, str],
    bcr: tuple[float, Interval],  # BCR, its ratio to the baseline's
    binding: tuple[str, str],
) -> SystemVerdict:
    """A sized system with a capacity on both paths and a BCR ratio with its interval."""
    values = (*names, cost, *capacities[0], *capacities[1], *agreement, bcr[0], *bcr[1], *binding)
    return SystemVerdict.model_validate(
        {"source": "sized", "emulated_basis": "capacity", **dict(zip(FIELDS, values, strict=True))}
    )


SAME_DC = measured(
    ("same-dc-pd", "P 4 x 16 h800-sxm + D 3 x 8 h800-sxm", "88 H800 x 1.0"),
    88.0,
    ((27.5, 26.0, 29.0), (26.8, 24.1, 29.3)),
    ("agree", "27.5 inside [24.1, 29.3]"),
    (0.305, (1.0, 1.0, 1.0)),
    ("prefill", "TTFT P99 at capacity"),
)
PDD = measured(
    ("pdd", "P 27 x 1 h800 + RLD 1 x 16 h20 + MD 2 x 16 h20", ""),
    87.6,
    ((22.9, 21.0, None), (21.6, 19.2, 23.7)),
    ("disagree", "22.9 outside [19.2, 23.7]"),
    (0.2466, (0.81, 0.70, 0.93)),
    ("decode TPOT", "main decode on H20, batch ~28"),
)
CROSS = SystemVerdict(  # refused: no capacity, no BCR
    **dict(system="cross-dc-pd", deployment="P 2 x 22 h800 + D 2 x 22 h800", cost=88.0),
    **dict(source="built-in", emulated_basis="refused", binding="WAN"),
    reason="the SLA failed at the lowest load",
)


def verdict(*systems: SystemVerdict, baseline: str = "same-dc-pd", **kw: object) -> MainVerdict:
    return MainVerdict(
        budget=88.0,
        baseline=baseline,
        sla_text=SLA_TEXT,
        emulation="emulated WAN, scale 1/100 for every system",
        systems=list(systems),
        **kw,  # type: ignore[arg-type]
    )


MAIN = verdict(
    SAME_DC,
    PDD,
    CROSS,
    notes=["cross-dc-pd: refused <at> the lowest load", "pdd: the twin & the emulation disagree"],
    wall_s=1620.0,
)
HEAD = f"At equal cost (88 A-eq.) and one SLA ({SLA_TEXT})"


# -- the sentence ---------------------------------------------------------------------------


def test_sentence_names_each_ratio_interval_and_binding() -> None:
    assert verdict(SAME_DC, PDD).sentence() == (
        f"{HEAD}, pdd delivers -19 % [-30 %, -7 %] goodput per unit cost against "
        "same-dc-pd, bound by decode TPOT (same-dc-pd: bound by prefill)."
    )


def test_sentence_of_twin_bcrs_says_so_and_what_the_emulated_check_found() -> None:
    base = SAME_DC.model_copy(update={"bcr_source": "twin", "twin_seeds": [26.0, 27.5, 29.0]})
    pdd = PDD.model_copy(update={"bcr_source": "twin", "twin_seeds": [21.0, 22.9, 24.0]})
    assert verdict(base, pdd).sentence() == (
        f"{HEAD}, on the virtual-time twin (the median of 3 deployment seeds, the range over "
        "them) checked by the real-time run (emulated WAN, scale 1/100 for every system), "
        "pdd delivers -19 % [-30 %, -7 %] goodput per unit cost against same-dc-pd, bound by "
        "decode TPOT (emulated check: DISAGREES (22.9 outside [19.2, 23.7])) (same-dc-pd: "
        "bound by prefill; emulated check: agrees)."
    )


def test_sentence_of_a_system_without_a_bcr_says_why() -> None:
    assert verdict(SAME_DC, PDD, CROSS).sentence() == (
        f"{HEAD}, pdd delivers -19 % [-30 %, -7 %] goodput per unit cost against "
        "same-dc-pd, bound by decode TPOT; cross-dc-pd has no BCR against same-dc-pd "
        "(the SLA failed at the lowest load) (same-dc-pd: bound by prefill)."
    )
    no_reason = CROSS.model_copy(update={"reason": ""})
    assert "cross-dc-pd has no BCR against same-dc-pd (refused)" in (
        verdict(SAME_DC, no_reason).sentence()
    )


def test_sentence_without_the_baseline_row() -> None:
    assert verdict(PDD).sentence() == (
        f"{HEAD}, pdd delivers -19 % [-30 %, -7 %] goodput per unit cost against "
        "same-dc-pd, bound by decode TPOT."
    )
    assert verdict(SAME_DC).sentence() == f"{HEAD}: no system could be compared with same-dc-pd."
    open_above = PDD.model_copy(update={"bcr_ratio_low": None, "bcr_ratio_high": None})
    assert "pdd delivers -19 % [?, open] goodput" in verdict(open_above).sentence()


# -- loading --------------------------------------------------------------------------------


def copy_points(root: Path, *verdicts: MainVerdict | None) -> list[Path]:
    """The fixture's capacity points copied under ``root``, a verdict saved into each."""
    out = []
    for src, v in zip(POINTS, verdicts, strict=True):
        dst = root / src.name
        shutil.copytree(src, dst)
        if v is not None:
            assert v.save(dst) == RunPaths(dst).main_verdict
        out.append(dst)
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return copy_points(tmp_path_factory.mktemp("points"), MAIN, MAIN)


def test_the_report_carries_the_folders_verdict(folders: list[Path], tmp_path: Path) -> None:
    assert len(POINTS) == 2
    assert build_report(folders).main_verdict == MAIN
    # one folder of the two carries it (the other was reported without the main job)
    one = copy_points(tmp_path / "one", None, MAIN)
    assert build_report(one).main_verdict == MAIN
    none = copy_points(tmp_path / "none", None, None)
    assert build_report(none).main_verdict is None


def test_two_different_verdicts_are_one_line_error(tmp_path: Path) -> None:
    other = verdict(SAME_DC, PDD.model_copy(update={"bcr_ratio": 0.9}))
    a, b = copy_points(tmp_path, MAIN, other)
    with pytest.raises(UserError) as err:
        build_report([a, b])
    msg = str(err.value)
    assert "\n" not in msg and "different main jobs" in msg
    assert str(RunPaths(a).main_verdict) in msg and str(RunPaths(b).main_verdict) in msg


def test_a_bad_verdict_file_is_one_line_naming_it(tmp_path: Path) -> None:
    a, b = copy_points(tmp_path, MAIN, MAIN)
    RunPaths(b).main_verdict.write_text('{"budget": "lots", "baseline": "x"}')
    with pytest.raises(UserError) as err:
        build_report([a, b])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{RunPaths(b).main_verdict}: ")


# -- rendering ------------------------------------------------------------------------------

TABLE_TEXTS = (
    # system, deployment, source, cost, twin, emulated, agreement, BCR, ratio, binding
    ("same-dc-pd (baseline)", SAME_DC.deployment, "sized", "88", "27.5 [26, 29]"),
    (
        "26.8 [24.1, 29.3]",
        "agree",
        "0.305 (emulated)",
        "baseline",
        "prefill",
        "TTFT P99 at capacity",
    ),
    ("pdd", PDD.deployment, "87.6", "22.9 [21, open]", "21.6 [19.2, 23.7]", "disagree"),
    ("0.247 (emulated)", "-19 % [-30 %, -7 %]", "decode TPOT", "main decode on H20, batch ~28"),
    ("cross-dc-pd", CROSS.deployment, "built-in", "refused: the SLA failed at the lowest load"),
    ("WAN",),
)


def test_html_opens_with_the_sentence_then_the_table(folders: list[Path]) -> None:
    report = build_report(folders)
    html = render(report, Format.HTML, Path("r.html"))
    sentence = f'<p class="verdict" id="verdict-sentence">{escape(MAIN.sentence())}</p>'
    assert "&lt;=" in sentence and sentence in html
    order = [
        "<h1>",
        'id="wan-banner"',
        'id="verdict-sentence"',
        'id="verdict-table"',
        "cross-dc-pd: refused &lt;at&gt; the lowest load",
        'class="meta"',
        "<nav>",
        "<section",
    ]
    at = [html.index(mark) for mark in order]
    assert at == sorted(at), dict(zip(order, at, strict=True))
    table = html[html.index('id="verdict-table"') : html.index("</table>")]
    for text in (t for row in TABLE_TEXTS for t in row):
        assert f">{escape(text)}<" in table, text
    assert "pdd: the twin &amp; the emulation disagree" in html
    assert "The main job took 27.0 min." in html


def test_html_without_a_verdict_is_as_before(folders: list[Path], tmp_path: Path) -> None:
    bare = build_report(copy_points(tmp_path, None, None))
    html = render(bare, Format.HTML, Path("r.html"))
    assert 'id="main-verdict"' not in html and "p.verdict" not in html
    with_it = render(build_report(folders), Format.HTML, Path("r.html"))
    assert "p.verdict" in with_it


def test_markdown_opens_with_the_sentence_then_the_table(
    folders: list[Path], tmp_path: Path
) -> None:
    text = render(build_report(folders), Format.MD, tmp_path / "r.md")
    first = text.index(f"**Verdict:** {_md(MAIN.sentence())}\n")
    assert text.index("> **WAN NOT EMULATED") < first < text.index("Runs: ")
    table = text[first : text.index("Runs: ")]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 + 3  # header, alignment, a row per system
    assert rows[2].startswith("| same-dc-pd (baseline) | ")
    for text_ in (t for row in TABLE_TEXTS for t in row):
        assert _md(text_) in table, text_
    assert "> cross-dc-pd: refused <at> the lowest load" in table
    assert first < text.index("\n## ")


def test_json_carries_every_field_of_the_table(folders: list[Path]) -> None:
    data = json.loads(render(build_report(folders), Format.JSON, Path("r.json")))
    got = data["main_verdict"]
    assert got["sentence"] == MAIN.sentence()
    assert MainVerdict.model_validate({k: v for k, v in got.items() if k != "sentence"}) == MAIN
    pdd = next(s for s in got["systems"] if s["system"] == "pdd")
    assert pdd["deployment"] == PDD.deployment and pdd["cost"] == 87.6
    assert (pdd["twin_capacity"], pdd["twin_low"], pdd["twin_high"]) == (22.9, 21.0, None)
    assert (pdd["emulated_capacity"], pdd["emulated_low"], pdd["emulated_high"]) == (
        21.6,
        19.2,
        23.7,
    )
    assert pdd["agreement"] == "disagree" and pdd["bcr"] == 0.2466
    assert (pdd["bcr_ratio"], pdd["bcr_ratio_low"], pdd["bcr_ratio_high"]) == (0.81, 0.7, 0.93)
    assert pdd["binding"] == "decode TPOT"


@pytest.mark.skipif(find_chromium() is None, reason="chromium not installed")
def test_the_first_screen_shows_the_sentence(folders: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_report(folders, out)
    shot = tmp_path / "first-screen.png"
    res = check_render(
        out, element_id="verdict-sentence", screenshot=shot, screenshot_size=VIEWPORT
    )
    assert res.ok and res.box is not None, res
    assert 500 <= res.box.viewport_height <= VIEWPORT[1]  # the window less its frame
    assert res.box.on_first_screen and res.box.top < res.box.viewport_height, res.box
    with Image.open(shot) as im:
        assert im.size == VIEWPORT
    # the same sentence moved below the figures is off the first screen: the check can fail
    html = out.read_text(encoding="utf-8")
    block = html[html.index('<div id="main-verdict">') : html.index('<p class="meta">')]
    assert block.endswith("</div>")
    moved = tmp_path / "moved.html"
    moved.write_text(html.replace(block, "", 1).replace("</main>", block + "</main>", 1))
    low = check_render(moved, element_id="verdict-sentence").box
    assert low is not None and low.shown and not low.on_first_screen, low
