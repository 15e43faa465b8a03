"""Check that a rendered HTML report opens in headless Chromium and shows every figure.

    python -m pddbench.harness.report.render_check REPORT.html [--screenshot out.png]

Copies the report, appends a probe script to the copy (the report itself carries no
script), loads it with ``chromium --headless --dump-dom`` in a ``VIEWPORT``-sized window
and reads the probe's verdict: how many ``<img>`` elements there are and how many decoded
to a non-empty bitmap (``naturalWidth > 0``), and where the element with ``element_id``
lies (:class:`Box`: its bounding box against the viewport, the first screen). Exits 0
when every image decoded, 1 when one did not, 2 when Chromium is missing or fails.
Optionally also writes a screenshot to look at (full page, or ``screenshot_size``).
Chromium is an optional tool: ``apt-get install -y chromium``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PROBE = """
<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const sections = document.querySelectorAll('section').length;
  const el = document.getElementById('__ELEMENT__');
  let box = 'none';
  if (el) {
    const r = el.getBoundingClientRect();
    const shown = getComputedStyle(el).visibility !== 'hidden' && r.width > 0 && r.height > 0;
    box = `${r.top},${r.bottom},${window.innerHeight},${shown ? 1 : 0}`;
  }
  document.body.setAttribute('data-probe',
    `images=${imgs.length};decoded=${ok};sections=${sections};box=${box}`);
});
</script>
"""
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
VIEWPORT = (1400, 900)  # the first screen: width, height in CSS pixels


@dataclass(frozen=True)
class Box:
    """Where an element lies on the page as first shown (CSS pixels from the top)."""

    top: float
    bottom: float
    viewport_height: float
    shown: bool  # not hidden, and of non-zero size

    @property
    def on_first_screen(self) -> bool:
        """Shown, and wholly inside the first viewport (no scrolling needed)."""
        return self.shown and self.top >= 0 and self.bottom <= self.viewport_height


@dataclass(frozen=True)
class RenderResult:
    images: int
    decoded: int
    sections: int
    box: Box | None = None  # the ``element_id`` element's, None when the page lacks it

    @property
    def ok(self) -> bool:
        return self.images > 0 and self.images == self.decoded


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def check_render(
    report: Path,
    *,
    screenshot: Path | None = None,
    screenshot_size: tuple[int, int] = (VIEWPORT[0], 4000),
    element_id: str = "",
    timeout_s: float = 60.0,
) -> RenderResult:
    """Load ``report`` in headless Chromium; RuntimeError if Chromium is missing or fails.

    ``element_id``: measure that element's box in the first viewport (:attr:`~.box`)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", element_id):
        raise ValueError(f"element id {element_id!r}: letters, digits, - and _ only")
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium not found (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="pddbench-render-") as tmp:
        probe = Path(tmp) / "probe.html"
        text = report.read_text(encoding="utf-8")
        script = PROBE.replace("__ELEMENT__", element_id)
        probe.write_text(text.replace("</body>", script + "</body>", 1), encoding="utf-8")
        profile = Path(tmp) / "profile"
        cmd = [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        match = re.search(
            r'data-probe="images=(\d+);decoded=(\d+);sections=(\d+);box=([^"]*)"', proc.stdout
        )
        if match is None:
            raise RuntimeError(f"chromium did not render the page (exit {proc.returncode})")
        if screenshot is not None:
            subprocess.run(
                [
                    chromium,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    f"--screenshot={screenshot}",
                    f"--window-size={screenshot_size[0]},{screenshot_size[1]}",
                    report.resolve().as_uri(),
                ],
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
    return RenderResult(
        int(match.group(1)), int(match.group(2)), int(match.group(3)), _box(match.group(4))
    )


def _box(text: str) -> Box | None:
    if text == "none":
        return None
    top, bottom, height, shown = (float(x) for x in text.split(","))
    return Box(top, bottom, height, shown == 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        res = check_render(args.report, screenshot=args.screenshot)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"render_check: {exc}", file=sys.stderr)
        return 2
    print(f"{args.report}: {res.sections} sections, {res.decoded}/{res.images} images decoded")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
