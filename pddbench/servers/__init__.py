"""Reference PDD and baseline servers: real processes, sockets and KV bytes; modelled GPUs.

Layout (sans-IO decision logic first, I/O at the edges):

* ``profiles`` + ``profiles/*.toml`` — hardware and model profiles with their sources;
* ``compute`` — roofline cost of a forward pass (prefill chunks, decode, extend);
* ``radix`` — prefix cache (radix tree of KV blocks) and KV memory of an instance;
* ``engine`` — continuous-batching scheduler of one instance; ``driver`` runs it in real time;
* ``handoff`` — RLD → MD handoff state machines (one-shot, catch-up, adaptive, KV ablation);
* ``routing`` — instance choice, link estimates, hit-rate-aware pipeline choice, merging;
* ``tokens`` — deterministic output tokens and prompt block hashes;
* ``config`` — deployment configuration (built-ins: the scenarios in ``pddbench/scenarios``);
* ``api`` / ``story`` — the public ``/v1/completions`` surface and the ``pdd`` object;
* ``instance`` (+ ``instance_handoff``, ``instance_metrics``), ``kvlink``, ``channel`` —
  worker instances, KV transfer over TCP, the instance → router event channel;
* ``router`` + ``flows`` — the front door and the per-request choreography;
* ``host`` — ``python -m pddbench.servers.host --config FILE``; ``cli`` — ``serve``.

Must not import ``pddbench.harness``.
"""
