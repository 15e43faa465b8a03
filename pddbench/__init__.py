"""pddbench: benchmark harness for cross-datacenter PD-disaggregated LLM serving.

Sub-packages mirror the pipeline: ``workloads`` (traces), ``netem`` (emulated links),
``servers`` (reference PDD and baseline servers), ``harness`` (CLI, replay, analysis).
"""

__version__ = "0.1.0"
