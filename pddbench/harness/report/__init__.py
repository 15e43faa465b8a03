"""Comparison reports over run folders: HTML (self-contained), Markdown, JSON.

``model`` decides what the report says (baseline, SLA, deltas, BCR, load curves);
``figures_*`` draw seaborn figures; ``tables`` and ``sections`` lay out the content;
``html`` / ``markdown`` / ``jsonout`` render it; ``render_check`` verifies a rendered
HTML file in headless Chromium. :func:`write_report` is the one entry point.
"""

from __future__ import annotations

from pddbench.harness.report.write import write_report

__all__ = ["write_report"]
