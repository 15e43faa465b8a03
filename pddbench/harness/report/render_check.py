"""Check that a rendered HTML report opens in headless Chromium and shows every figure.

    python -m pddbench.harness.report.render_check REPORT.html [--screenshot out.png]

Copies the report, appends a probe script to the copy (the report itself carries no
script), loads it with ``chromium --headless --dump-dom`` and reads the probe's verdict:
how many ``<img>`` elements there are and how many decoded to a non-empty bitmap
(``naturalWidth > 0``). Exits 0 when every image decoded, 1 when one did not, 2 when
Chromium is missing or fails. Optionally also writes a full-page screenshot to look at.
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
  document.body.setAttribute('data-probe',
    `images=${imgs.length};decoded=${ok};sections=${sections}`);
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


@dataclass(frozen=True)
class RenderResult:
    images: int
    decoded: int
    sections: int

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
    report: Path, *, screenshot: Path | None = None, timeout_s: float = 60.0
) -> RenderResult:
    """Load ``report`` in headless Chromium; RuntimeError if Chromium is missing or fails."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium not found (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="pddbench-render-") as tmp:
        probe = Path(tmp) / "probe.html"
        text = report.read_text(encoding="utf-8")
        probe.write_text(text.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
        profile = Path(tmp) / "profile"
        cmd = [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        match = re.search(r'data-probe="images=(\d+);decoded=(\d+);sections=(\d+)"', proc.stdout)
        if match is None:
            raise RuntimeError(f"chromium did not render the page (exit {proc.returncode})")
        if screenshot is not None:
            subprocess.run(
                [
                    chromium,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    f"--screenshot={screenshot}",
                    "--window-size=1400,4000",
                    report.resolve().as_uri(),
                ],
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
    return RenderResult(int(match.group(1)), int(match.group(2)), int(match.group(3)))


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
