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

from pddbench.servers import profiles
from pddbench.servers.compute import (
    Machine,
    decode_step_seconds,
    extend_step_seconds,
    kv_copy_seconds,
)

WAN = 10e9 / 8
ONE_WAY = 0.015
JITTER = 0.003


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=36000)
    ap.add_argument("--tokens", type=int, default=100)
    a = ap.parse_args()
    model = profiles.model("pdd-flagship-1t")
    md = Machine(profiles.hardware("h20"), 16, model)
    rld = Machine(profiles.hardware("h800-sxm"), 16, model)
    step = decode_step_seconds(md, a.batch, a.batch * a.context)
    ext = extend_step_seconds(md, a.tokens, a.context)
    ids = 1500 / WAN
    ed_mean = 2 * ONE_WAY + ids + step / 2 + ext
    ed_max = 2 * (ONE_WAY + JITTER) + ids + step + ext
    kv_bytes = (a.tokens - 1) * model.kv_bytes_per_token
    copy_rld = kv_copy_seconds(rld, a.tokens - 1, 64)
    copy_md = kv_copy_seconds(md, a.tokens - 1, 64)
    kv_mean = 2 * ONE_WAY + kv_bytes / WAN + copy_rld + copy_md
    kv_max = kv_mean + 2 * JITTER
    print(f"MD: 16 x H20, decode batch {a.batch} at {a.context} tokens: step {step * 1e3:.1f} ms")
    print(
        f"Extend-Decode ({a.tokens} tokens): 1.5 KB; extend step {ext * 1e3:.1f} ms; "
        f"send->ack mean {ed_mean * 1e3:.0f} ms, max {ed_max * 1e3:.0f} ms"
    )
    print(
        f"KV handoff: {kv_bytes / 1e3:.0f} KB; copies {copy_rld * 1e3:.2f} + "
        f"{copy_md * 1e3:.2f} ms; send->ack mean {kv_mean * 1e3:.0f} ms, max "
        f"{kv_max * 1e3:.0f} ms on an idle WAN (queueing behind prompt KV not modelled)"
    )


if __name__ == "__main__":
    main()
