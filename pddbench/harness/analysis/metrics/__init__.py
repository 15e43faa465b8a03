"""The metrics: one small class per metric, grouped by subject in this package's modules.

Every concrete :class:`~pddbench.harness.analysis.registry.DistributionMetric` or
:class:`~pddbench.harness.analysis.registry.ScalarMetric` defined in a module here is
found by :func:`~pddbench.harness.analysis.registry.default_registry`; adding a metric
is adding one class. Modules: ``latency`` (TTFT, TPOT, ITL, E2E, queueing, schedule lag),
``throughput`` (counts, duration, RPS, token throughput), ``goodput`` (SLA attainment,
goodput, errors, BCR), ``cache`` (hit rate, cache fidelity), ``pdd`` (RLD share, WAN,
handoff spikes), ``session`` (task completion, per-session goodput).
"""
