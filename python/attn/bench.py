"""Benchmark every backend that serves a Llama-style layer, from Python, and plot it.

    python -m attn.bench --plot bench.png [--quick] [--json results.json]

Decode steps (one new token per sequence) are memory-bound: the figure is achieved bandwidth,
KV-cache bytes read ÷ time, per backend and shape, with this machine's measured read bandwidth
(NumPy dot products on all cores, over an array far larger than the caches) drawn as the ceiling.
The prefill shape is compute-bound, so it is reported in time only.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import attn

DTYPES = {"float32": np.float32, "float16": np.float16}


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return DTYPES[name]


def measure_read_bandwidth(megabytes: int = 1024, threads: int | None = None, repeats: int = 5) -> float:
    """GB/s of a plain streaming read on all cores (the ceiling a memory-bound kernel can reach)."""
    threads = threads or os.cpu_count() or 1
    a = np.ones(megabytes * (1 << 20) // 4, dtype=np.float32)
    parts = np.array_split(a, threads)
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:  # NumPy releases the GIL in dot / reductions
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(lambda x: np.dot(x, x), parts))  # a SIMD read with nothing to write
            best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def _median_seconds(fn, min_time: float, max_runs: int) -> float:
    fn()  # warm-up: first-touch of the output, thread pool start
    times = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < 3 or time.perf_counter() - start < min_time):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_case(cfg: attn.LayerConfig, backend: str, batch: int, context: int, query: int, rng, min_time: float,
             max_runs: int) -> dict:
    """One (backend, shape): a cache holding `context` tokens per sequence plus `query` new ones."""
    layer = attn.Attention(cfg, backend)
    bs = layer.block_size
    per_seq = -(-(context + query) // bs)
    cache = layer.make_cache(batch * per_seq)
    cache.fill(0.5)  # the contents do not change the speed (no NaN / denormals); every page touched
    ids = rng.permutation(batch * per_seq).reshape(batch, per_seq).tolist()
    md = attn.BatchMetadata(context_lens=[context] * batch, query_lens=[query] * batch, block_ids=ids, cache=cache)
    dt = _numpy_dtype(cfg.dtype)
    q = rng.standard_normal((md.num_tokens, cfg.num_heads, cfg.head_size)).astype(np.float32).astype(dt)
    out = np.empty((md.num_tokens, cfg.num_heads, cfg.effective_head_size_v), dtype=dt)
    seconds = _median_seconds(lambda: layer.forward(q, cache, md, out=out), min_time, max_runs)
    seq_len = context + query
    kv_bytes = batch * seq_len * cfg.num_kv_heads * (cfg.head_size + cfg.effective_head_size_v) * \
        np.dtype(cache.numpy().dtype).itemsize
    return {"backend": backend, "variant": layer.variant, "batch": batch, "context": context, "query": query,
            "ms": seconds * 1e3, "kv_bytes": int(kv_bytes), "gbps": kv_bytes / seconds / 1e9}


def run(quick: bool = False, dtype: str = "bfloat16", backends: list | None = None, min_time: float = 0.3) -> dict:
    cfg = attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype=dtype)  # Llama-3-8B
    valid = [c.backend for c in attn.explain(cfg).candidates if c.valid]
    chosen = [b for b in valid if backends is None or b in backends]
    decode = [(1, 2048), (8, 1024), (8, 4096)] if quick else [(1, 4096), (8, 1024), (8, 4096), (32, 2048)]
    prefill = (1, 0, 512)
    rng = np.random.default_rng(0)
    results = []
    for backend in chosen:
        for batch, context in decode:
            r = run_case(cfg, backend, batch, context, 1, rng, min_time, 3 if quick else 10)
            results.append(dict(r, kind="decode"))
            print(f"{backend:>12} decode B={batch:<3} L={context:<5} {r['ms']:9.3f} ms  {r['gbps']:7.2f} GB/s", flush=True)
        r = run_case(cfg, backend, prefill[0], prefill[1], prefill[2], rng, min_time, 3 if quick else 5)
        results.append(dict(r, kind="prefill"))
        print(f"{backend:>12} prefill B=1   T={prefill[2]:<5} {r['ms']:9.3f} ms", flush=True)
    ceiling = measure_read_bandwidth(256 if quick else 1024)
    print(f"read-bandwidth ceiling ({os.cpu_count()} threads): {ceiling:.1f} GB/s")
    # Other processes on the cores skew every figure: the load is recorded with them.
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"config": cfg.to_dict(), "platform": repr(attn.platform()), "ceiling_gbps": ceiling,
            "load_average": load, "results": results}


def plot(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decode = [r for r in data["results"] if r["kind"] == "decode"]
    prefill = [r for r in data["results"] if r["kind"] == "prefill"]
    backends = list(dict.fromkeys(r["backend"] for r in data["results"]))
    shapes = list(dict.fromkeys((r["batch"], r["context"]) for r in decode))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(1, len(backends))
    for i, b in enumerate(backends):
        by_shape = {(r["batch"], r["context"]): r for r in decode if r["backend"] == b}
        xs = [j + i * width for j in range(len(shapes))]
        ys = [by_shape[s]["gbps"] if s in by_shape else 0 for s in shapes]
        variant = next((r["variant"] for r in decode if r["backend"] == b and r["variant"]), "")
        bars = ax.bar(xs, ys, width, label=f"{b} [{variant}]" if variant else b)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.axhline(data["ceiling_gbps"], color="black", linestyle="--",
               label=f"measured read ceiling {data['ceiling_gbps']:.0f} GB/s")
    ax.set_xticks([j + width * (len(backends) - 1) / 2 for j in range(len(shapes))])
    ax.set_xticklabels([f"B={bt} L={c}" for bt, c in shapes])
    ax.set_yscale("log")
    ax.set_ylabel("KV bytes read / time (GB/s, log)")
    cfg = data["config"]
    ax.set_title(f"decode, {cfg['num_heads']}/{cfg['num_kv_heads']} heads × {cfg['head_size']}, {cfg['dtype']}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    ax2.bar(range(len(prefill)), [r["ms"] for r in prefill], color=[f"C{backends.index(r['backend'])}" for r in prefill])
    ax2.set_xticks(range(len(prefill)))
    ax2.set_xticklabels([r["backend"] for r in prefill], rotation=20, fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("time (ms, log)")
    ax2.set_title(f"prefill, {prefill[0]['query'] if prefill else 0} tokens")
    fig.suptitle(f"{data['platform']}; load average {data.get('load_average', float('nan')):.1f} during the run",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m attn.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--plot", metavar="FILE.png", help="draw the results into this PNG")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--quick", action="store_true", help="fewer shapes and runs (a smoke run)")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--backend", action="append", help="only this backend (repeatable); default: every valid one")
    args = p.parse_args(argv)
    data = run(args.quick, args.dtype, args.backend)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.plot:
        plot(data, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
