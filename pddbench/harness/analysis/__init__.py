"""Analysis of run folders: metrics registry, SLA, goodput, BCR, breakdowns, capacity search.

Reads what the replay writes (``results/<run>/``, see ``rundir``) and never runs
anything. Layout: ``recordset`` (records as columns + derived per-request columns),
``registry`` + ``metrics/`` (one small class per metric), ``sla``, ``cost`` (BCR),
``breakdowns``, ``series`` (figure curves), ``summary`` (one run's full analysis),
``capacity`` (pure capacity-search logic), ``synthetic`` (synthetic run folders for
tests and demos). Reports live in ``harness.report``, nightly verdicts in
``harness.regress``.
"""
