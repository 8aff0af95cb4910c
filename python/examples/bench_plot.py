"""Benchmark every backend that serves a Llama-style layer, from Python, and plot it.

    python python/examples/bench_plot.py --plot bench.png [--quick] [--json results.json] [--threads N]

Decode steps (one new token per sequence) are memory-bound: the figure is achieved bandwidth,
KV-cache bytes read ÷ time, per backend and shape, with this machine's measured read bandwidth
(NumPy dot products on the same threads) drawn as the ceiling. The prefill shape is
compute-bound, so it is reported in time only.

Each case is set up and timed as `attn bench` does it, so the two agree on the shapes they share
(Llama-3.1-8B decode B=1 and B=8 at 4096 tokens): the cache is the one the backend asks for
(`Attention.make_cache`: cpu_flash's HND_PAIRS layout and block size), first touched by every
thread, in enough disjoint copies of the batch to span a pool of at least 4× the last-level cache
(so the calls of one case never re-read what the previous call left in cache: DRAM figures;
`--quick` uses a smaller pool and labels its figures as cache figures); every sequence's blocks
are scattered (a random permutation of the cache's blocks, as after a long serving run); each
timed call is one engine step of a one-layer model (`plan` the step, `run` the layer with a
reused Workspace — what `attn bench` times as forward); a figure is the median of 9 calls after
one warm-up (3 with `--quick`). What Python adds is the call itself: 10–15 µs per step
(argument checks and two calls into the extension), measured against `attn bench`'s own
workload at one thread — about 2 % of a B=1 ctx 4096 decode step (0.7 ms on 2 threads), 0.2 %
at B=8.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
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


MIB = 1 << 20
# The pool rule of attn's bench kit (attn_bench::dram_pool_min, testkit/include/testkit/bench_kit.hpp):
# a pool of at least this many LLCs is a DRAM pool.
DRAM_POOL_LLCS = 4


def _sysfs_size(text: str) -> int:
    """sysfs cache sizes read "32768K" / "260M"."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text and text[-1].upper() in units else int(text or 0)


def _sysfs_field(index: str, name: str) -> str:
    with open(os.path.join(index, name)) as f:
        return f.read().strip()


def last_level_cache_bytes() -> int:
    """Total last-level cache: every CPU's deepest data cache, each shared instance counted once
    (by its shared_cpu_list), as `attn bench` reads it; 0 when unknown."""
    best_level, instances = 0, {}
    for index in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*"):
        try:
            if _sysfs_field(index, "type") == "Instruction":
                continue
            level, size = int(_sysfs_field(index, "level")), _sysfs_size(_sysfs_field(index, "size"))
            if level > best_level:
                best_level, instances = level, {}
            if level == best_level and size:
                instances[_sysfs_field(index, "shared_cpu_list")] = size
        except (OSError, ValueError):
            continue
    if instances:
        return sum(instances.values())
    try:
        return max(0, os.sysconf("SC_LEVEL3_CACHE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def choose_pool(quick: bool) -> tuple[int, str]:
    """(bytes, label): 4× the LLC (1 GiB if unknown) for a full run, at most 64 MiB for --quick;
    "dram" only when the pool really is ≥ 4× a known LLC, else "cache"."""
    llc = last_level_cache_bytes()
    full = DRAM_POOL_LLCS * llc if llc else 1024 * MIB
    pool = min(full, 64 * MIB) if quick else max(full, 64 * MIB)
    return pool, "dram" if llc and pool >= DRAM_POOL_LLCS * llc else "cache"


def cores() -> int:
    """The CPUs this process may run on (what the kernels' "all cores" means)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measure_read_bandwidth(pool_bytes: int, threads: int | None = None, repeats: int = 7) -> float:
    """Median GB/s of a streaming read of a `pool_bytes` array on `threads` threads (default: all
    cores; each pass reads the whole pool, so with a DRAM pool nothing a pass reads first is
    still cached)."""
    threads = threads or cores()
    a = np.ones(pool_bytes // 4, dtype=np.float32)
    parts = np.array_split(a, threads)
    rates = []
    with ThreadPoolExecutor(threads) as pool:  # NumPy releases the GIL in dot / reductions
        list(pool.map(lambda x: np.dot(x, x), parts))  # warm-up: threads started, pages mapped
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(lambda x: np.dot(x, x), parts))  # a SIMD read with nothing to write
            rates.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
    return statistics.median(rates)


REPS, QUICK_REPS = 9, 3  # timed calls per case after one warm-up, as `attn bench` times each shape
FIRST_TOUCH_CHUNK = 2 * MIB


def median_after_warmup(call, reps: int) -> float:
    """Median seconds of call(1) .. call(reps) after call(0) as a warm-up (output first-touch,
    thread start): the statistic `attn bench` gives every figure."""
    call(0)
    times = []
    for i in range(1, reps + 1):
        t0 = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def shuffled_block_ids(rng, instances: int, batch: int, blocks_per_seq: int) -> list:
    """[instance][sequence] -> block ids: a random permutation of the cache's blocks dealt out in
    turn, so instances are disjoint and every sequence's blocks lie scattered, as after a long
    serving run (`attn bench` deals its blocks the same way)."""
    ids = rng.permutation(instances * batch * blocks_per_seq)
    return ids.reshape(instances, batch, blocks_per_seq).tolist()


def first_touch(cache: attn.KVCache, threads: int) -> None:
    """Zeroes the storage in contiguous runs of 2 MiB chunks, one run per thread (as `attn bench`
    does): on a machine with several memory nodes the pages then spread the way a serving
    process's do. NumPy releases the GIL while it fills."""
    raw = cache.numpy().reshape(-1).view(np.uint8)
    chunks = -(-raw.nbytes // FIRST_TOUCH_CHUNK)
    bounds = [min(raw.nbytes, FIRST_TOUCH_CHUNK * (chunks * t // threads)) for t in range(threads + 1)]

    def zero(t: int) -> None:
        raw[bounds[t]:bounds[t + 1]] = 0

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(zero, range(threads)))


class Case:
    """One (backend, shape) prepared the way `attn bench` prepares it: the cache the layer's
    backend asks for (layout, dtype and block size from its cache_spec), in as many disjoint
    copies ("instances") of the batch as fill `pool_bytes` (at least two), blocks dealt out by
    shuffled_block_ids. Each timed call is one engine step of a one-layer model: plan the step's
    metadata, run the layer under the plan with a reused Workspace — what `attn bench` times as
    forward (plan + run)."""

    def __init__(self, cfg: attn.LayerConfig, backend: str, batch: int, context: int, query: int, rng,
                 pool_bytes: int, threads: int = 0):
        self.layer = attn.Attention(cfg, backend, num_threads=threads)
        bs = self.layer.block_size
        blocks_per_seq = -(-(context + query) // bs)
        probe = self.layer.make_cache(1)
        self.row_bytes = probe.num_kv_heads * (probe.head_size + probe.head_size_v) * probe.numpy().dtype.itemsize
        del probe
        per_instance = self.row_bytes * bs * blocks_per_seq * batch
        self.instances = max(2, math.ceil(pool_bytes / per_instance))
        self.cache = self.layer.make_cache(self.instances * batch * blocks_per_seq)
        first_touch(self.cache, threads or cores())
        self.cache.fill(0.5)  # the contents do not change the speed (no NaN / denormals)
        self.block_ids = shuffled_block_ids(rng, self.instances, batch, blocks_per_seq)
        self.metadata = [attn.BatchMetadata(context_lens=[context] * batch, query_lens=[query] * batch, block_ids=ids,
                                            cache=self.cache) for ids in self.block_ids]
        dt = _numpy_dtype(cfg.dtype)
        tokens = self.metadata[0].num_tokens
        self.q = rng.standard_normal((tokens, cfg.num_heads, cfg.head_size)).astype(np.float32).astype(dt)
        self.out = np.empty((tokens, cfg.num_heads, cfg.effective_head_size_v), dtype=dt)
        self.workspace = attn.Workspace()
        self.kv_bytes = batch * (context + query) * self.row_bytes  # every call reads each sequence's KV once

    def step(self, i: int) -> None:
        """Call i reads instance i mod instances: one plan of its metadata, one run."""
        md = self.metadata[i % self.instances]
        self.layer.run(self.layer.plan(md, self.cache), self.q, self.cache, self.out, workspace=self.workspace)


def run_case(cfg: attn.LayerConfig, backend: str, batch: int, context: int, query: int, rng, reps: int,
             pool_bytes: int, threads: int = 0) -> dict:
    """One (backend, shape): `context` tokens per sequence plus `query` new ones (see Case)."""
    case = Case(cfg, backend, batch, context, query, rng, pool_bytes, threads)
    seconds = median_after_warmup(case.step, reps)
    return {"backend": backend, "variant": case.layer.variant, "kv_layout": case.cache.layout, "batch": batch,
            "context": context, "query": query, "ms": seconds * 1e3, "kv_bytes": int(case.kv_bytes),
            "gbps": case.kv_bytes / seconds / 1e9, "instances": case.instances}


def run(quick: bool = False, dtype: str = "bfloat16", backends: list | None = None, threads: int = 0) -> dict:
    cfg = attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype=dtype)  # Llama-3-8B
    valid = [c.backend for c in attn.explain(cfg).candidates if c.valid]
    chosen = [b for b in valid if backends is None or b in backends]
    decode = [(1, 2048), (8, 1024), (8, 4096)] if quick else [(1, 4096), (8, 1024), (8, 4096), (32, 2048)]
    prefill = (1, 0, 512)
    rng = np.random.default_rng(0)
    pool_bytes, pool_label = choose_pool(quick)
    reps = QUICK_REPS if quick else REPS
    print(f"last-level cache {last_level_cache_bytes() / MIB:.0f} MiB; pool {pool_bytes / MIB:.0f} MiB: "
          f"{'DRAM' if pool_label == 'dram' else 'CACHE (not DRAM)'} figures", flush=True)
    results = []
    for backend in chosen:
        for batch, context in decode:
            r = run_case(cfg, backend, batch, context, 1, rng, reps, pool_bytes, threads)
            results.append(dict(r, kind="decode"))
            print(f"{backend:>12} decode B={batch:<3} L={context:<5} {r['ms']:9.3f} ms  {r['gbps']:7.2f} GB/s  "
                  f"({r['kv_layout']} cache)", flush=True)
        r = run_case(cfg, backend, prefill[0], prefill[1], prefill[2], rng, reps, pool_bytes, threads)
        results.append(dict(r, kind="prefill"))
        print(f"{backend:>12} prefill B=1   T={prefill[2]:<5} {r['ms']:9.3f} ms", flush=True)
    ceiling = measure_read_bandwidth(pool_bytes, threads, repeats=3 if quick else 7)
    print(f"read-bandwidth ceiling ({threads or cores()} threads, median): {ceiling:.1f} GB/s ({pool_label})")
    # Other processes on the cores skew every figure: the load is recorded with them.
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"config": cfg.to_dict(), "platform": repr(attn.platform()), "ceiling_gbps": ceiling,
            "pool": pool_label, "pool_bytes": pool_bytes, "llc_bytes": last_level_cache_bytes(),
            "load_average": load, "threads": threads or cores(), "results": results}


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
    memory = "DRAM" if data.get("pool") == "dram" else "cache"
    ax.axhline(data["ceiling_gbps"], color="black", linestyle="--",
               label=f"measured {memory} read ceiling {data['ceiling_gbps']:.0f} GB/s (median)")
    ax.set_xticks([j + width * (len(backends) - 1) / 2 for j in range(len(shapes))])
    ax.set_xticklabels([f"B={bt} L={c}" for bt, c in shapes])
    ax.set_yscale("log")
    ax.set_ylabel(f"KV bytes read / time (GB/s, log; {memory} figures)")
    cfg = data["config"]
    ax.set_title(f"decode, {cfg['num_heads']}/{cfg['num_kv_heads']} heads × {cfg['head_size']}, {cfg['dtype']}")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    ax2.bar(range(len(prefill)), [r["ms"] for r in prefill], color=[f"C{backends.index(r['backend'])}" for r in prefill])
    ax2.set_xticks(range(len(prefill)))
    ax2.set_xticklabels([r["backend"] for r in prefill], rotation=20, fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("time (ms, log)")
    ax2.set_title(f"prefill, {prefill[0]['query'] if prefill else 0} tokens")
    fig.suptitle(f"{data['platform']}; data rotated over {data.get('pool_bytes', 0) / MIB:.0f} MiB "
                 f"(LLC {data.get('llc_bytes', 0) / MIB:.0f} MiB); load average "
                 f"{data.get('load_average', float('nan')):.1f} during the run", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python python/examples/bench_plot.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--plot", metavar="FILE.png", help="draw the results into this PNG")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--quick", action="store_true", help="fewer shapes and runs (a smoke run)")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--backend", action="append", help="only this backend (repeatable); default: every valid one")
    p.add_argument("--threads", type=int, default=0, help="threads per call and for the ceiling (0 = all cores)")
    args = p.parse_args(argv)
    data = run(args.quick, args.dtype, args.backend, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
    if args.plot:
        plot(data, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
