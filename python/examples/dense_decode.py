"""attn.attention vs torch's scaled_dot_product_attention on the same dense tensors: a decode step
(one query per sequence) over a dense K/V context, read in place by attn (no copy).

    python python/examples/dense_decode.py [--batch 8] [--context 4096] [--runs 15] [--threads N]

Llama-3.1-8B attention by default (32 q / 8 kv heads x 128, bf16). K/V are 134 MB at B=8 ctx 4096,
four times the last-level cache of the machines this was written on: each call reads them from
DRAM. The two are timed in turns, median of --runs after a warm-up; the load average is shown.
"""
import argparse
import os
import statistics
import time

import torch

import attn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=128)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="torch and attn threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(a.batch, a.heads, 1, a.head_size, generator=g).bfloat16()
    k, v = (torch.randn(a.batch, a.kv_heads, a.context, a.head_size, generator=g).bfloat16() for _ in range(2))
    calls = {
        "attn": lambda: attn.attention(q, k, v, enable_gqa=True),
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    }
    for f in calls.values():
        f()
    times = {n: [] for n in calls}
    load = os.getloadavg()[0]
    for _ in range(a.runs):
        for n, f in calls.items():
            t0 = time.perf_counter()
            f()
            times[n].append(time.perf_counter() - t0)
    err = (calls["attn"]().float() - calls["sdpa"]().float()).abs().max().item()
    kv_bytes = 2 * k.numel() * k.element_size()
    print(f"decode B={a.batch} ctx {a.context}, {a.heads}q/{a.kv_heads}kv x {a.head_size}, bf16, {torch.get_num_threads()} "
          f"thread(s); median of {a.runs} interleaved runs; load average {load:.2f}")
    for n, t in times.items():
        med = statistics.median(t)
        print(f"{n:>5}: {med * 1e3:8.2f} ms  {kv_bytes / med / 1e9:6.1f} GB/s of K/V")
    print(f"attn / sdpa speed: {statistics.median(times['sdpa']) / statistics.median(times['attn']):.1f}x   "
          f"max |attn - sdpa| = {err:.4f}")


if __name__ == "__main__":
    main()
