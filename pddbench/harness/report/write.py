"""Writing a report file: build the report, render it in the chosen format, save it.

Owns the file edge of reporting (paths, formats, atomic write); the content is
``model``'s and ``sections``', the markup the renderers'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.report.html import render_html
from pddbench.harness.report.jsonout import report_json
from pddbench.harness.report.markdown import render_markdown
from pddbench.harness.report.model import Report, build_report
from pddbench.harness.report.sections import build_sections


class Format(StrEnum):
    HTML = "html"
    MD = "md"
    JSON = "json"


def check_writable(path: Path) -> None:
    """Refuse an output path that cannot be written (missing folder, a folder itself)."""
    if not path.parent.is_dir():
        raise UserError(f"{path}: folder {path.parent} does not exist")
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give a file name")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a `.partial` file renamed into place)."""
    check_writable(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None


def render(report: Report, fmt: Format, out: Path) -> str:
    if fmt is Format.JSON:
        return json.dumps(report_json(report), indent=2, allow_nan=False) + "\n"
    sections = build_sections(report)
    if fmt is Format.MD:
        return render_markdown(report, sections, out)
    return render_html(report, sections)


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    fmt: Format = Format.HTML,
    json_out: str | Path | None = None,
    **options: object,
) -> Report:
    """Build the report of ``run_dirs`` and write it to ``out`` (and JSON to ``json_out``)."""
    report = build_report(run_dirs, **options)  # type: ignore[arg-type]
    out = Path(out)
    write_text(out, render(report, fmt, out))
    if json_out is not None:
        write_text(Path(json_out), render(report, Format.JSON, Path(json_out)))
    return report
