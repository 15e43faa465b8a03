"""The harness commands (replay, finalize, scenario, report/regress, capacity, nightly, engines).

Thin click modules only: each parses its options and hands over to the pipeline, the
drive, the analysis or the report; ``pddbench.cli`` mounts them lazily.
"""
