"""Declared PDD experiments (E1–E12): declarations, runners, shape checks, the report.

``catalog`` declares; ``run_trace`` / ``run_model`` / ``run_replay`` measure; ``checks``
and ``model`` judge (sans-IO); ``runner`` loops with progress; ``report`` writes the
reproduction report from the out folder alone.
"""
