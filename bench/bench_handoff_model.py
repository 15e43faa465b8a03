"""E7 from the compute model alone: a 100-token RLD -> MD handoff, KV transfer vs Extend-Decode.

    .venv/bin/python bench/bench_handoff_model.py [--batch 32] [--context 36000]

Without the emulated WAN (bench/bench_handoff.py needs root and namespaces) this prices the
two handoffs' parts from the model and the pdd scenario's WAN (10 Gbit/s, 15 ms one way,
±3 ms jitter), for MD (16 x H20, the flagship) decoding ``--batch`` sequences at
``--context`` tokens:

* Extend-Decode: 1.5 KB of token ids one way, MD waits for the decode step in flight
  (uniform over one step), runs the 100-token extend as its own forward pass, and answers;
* KV transfer: RLD gathers the KV of 99 tokens into host memory (copy calls + PCIe), 4.6 MB
  cross the WAN, MD scatters it into its pages and answers.

Send -> acknowledgement, as bench_handoff.py measures it. WAN queueing behind other KV
(the published KV peak) is not modelled here: it needs the emulated WAN.
"""

from __future__ import annotations

import argparse

from pddbench.harness.experiments.compute_model import price_handoff


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=36000)
    ap.add_argument("--tokens", type=int, default=100)
    a = ap.parse_args()
    p = price_handoff(batch=a.batch, context=a.context, tokens=a.tokens)
    print(
        f"MD: 16 x H20, decode batch {a.batch} at {a.context} tokens: step "
        f"{p.md_step_s * 1e3:.1f} ms"
    )
    print(
        f"Extend-Decode ({a.tokens} tokens): 1.5 KB; extend step {p.extend_step_s * 1e3:.1f} ms; "
        f"send->ack mean {p.ed_mean_s * 1e3:.0f} ms, max {p.ed_max_s * 1e3:.0f} ms"
    )
    print(
        f"KV handoff: {p.kv_bytes / 1e3:.0f} KB; copies {p.kv_copy_rld_s * 1e3:.2f} + "
        f"{p.kv_copy_md_s * 1e3:.2f} ms; send->ack mean {p.kv_mean_s * 1e3:.0f} ms, max "
        f"{p.kv_max_s * 1e3:.0f} ms on an idle WAN (queueing behind prompt KV not modelled)"
    )


if __name__ == "__main__":
    main()
