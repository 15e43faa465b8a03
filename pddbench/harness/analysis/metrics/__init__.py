"""The metrics: the catalog of declarations and the computations behind them.

``catalog`` holds one row of declarations per metric (the ``METRICS`` table that
:func:`~pddbench.harness.analysis.registry.default_registry` registers); adding a metric
is adding one row. The subject modules hold the computations that are more than reading
one records column: ``latency`` (ITL views), ``throughput`` (counts, window, rates),
``goodput`` (SLA attainment, goodput, errors, BCR), ``cache`` (hit rate, cache fidelity),
``pdd`` (RLD share, WAN, handoff spikes), ``session`` (task completion, per-session
goodput). A module may also define a metric as a class (see ``registry``).
"""
