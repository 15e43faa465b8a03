"""Nightly regression verdicts: history on disk, noise model, step detection, reports.

``history`` reads ``DIR/<night>/<run folders>``; ``stepdetect`` fits piecewise-constant
levels; ``noise`` holds the statistics; ``verdict`` decides regression / improvement /
noise per metric; ``check`` orchestrates ``pddbench regress``; ``report`` renders it.
"""
