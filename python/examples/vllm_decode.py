"""vLLM decode throughput on CPU with attn as its attention backend vs vLLM's own CPU_ATTN.

A Llama-3.2-1B-shaped model (16 layers, hidden 2048, 32 q / 8 kv heads x 64, MLP 8192, vocab
128256, random weights, bf16) is built locally. One process per thread count holds two in-process
engines over the same weights: the first with vLLM's CPU_ATTN, the second with attn (registered
only after the first was built). For each batch x prompt length the two are timed in turns
(interleaved runs, median): the prompts are prefilled once (prefix caching keeps them), then
decode time = time(1 + N new tokens) - time(1 new token) for the same cached prompts.

    python python/examples/vllm_decode.py [--batches 1 4 16] [--prompts 512 2048 8192] [--threads 1 2]
                                          [--new-tokens 16] [--runs 3] [--layers 16]

Needs vLLM's CPU build (scripts/install_vllm.py makes a venv with it). Prints one row per cell:
output tokens/s of each and the ratio, and the milliseconds per decode step each engine spent in its
attention calls (what bounds the ratio: the rest of a step is the model's weights), with the load
average before and after. Each engine is checked to run the backend its column names.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build_model(path: Path, layers: int) -> None:
    import torch
    import transformers

    if (path / "config.json").exists():
        return
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                   max_position_embeddings=16384, rope_theta=500000.0, tie_word_embeddings=True,
                                   torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    model.save_pretrained(path, safe_serialization=True)


def worker(args) -> None:
    """One thread count: both engines in this process, cells timed in turns."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["ATTN_VLLM"] = "0"  # the first engine: vLLM's own CPU_ATTN
    from vllm import LLM, SamplingParams

    # Each engine must run the backend its column names (attn's layers are counted as they run),
    # and each engine's attention calls are timed: their share of a decode step. (A layer attn left
    # to CPU_ATTN would be timed twice; this model's layers are all attn's.)
    from attn.integrations import vllm_backend
    from vllm.v1.attention.backends import cpu_attn

    calls, spent = [0], [0.0]

    def timed(f, count=False):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t
                calls[0] += count
        return call

    vllm_backend.AttnImpl.forward = timed(vllm_backend.AttnImpl.forward, count=True)
    for name in ("forward", "do_kv_cache_update"):  # CPU_ATTN writes the step's K/V in a call of its own
        setattr(cpu_attn.CPUAttentionBackendImpl, name, timed(getattr(cpu_attn.CPUAttentionBackendImpl, name)))
    max_len = max(args.prompts) + args.new_tokens + 8
    common = dict(model=args.model, dtype="bfloat16", max_model_len=max_len, enforce_eager=True, seed=0,
                  skip_tokenizer_init=True, enable_prefix_caching=True, max_num_seqs=max(args.batches),
                  max_num_batched_tokens=max(8192, max_len), block_size=128)
    engines = {"CPU_ATTN": LLM(**common)}
    os.environ["ATTN_VLLM"] = "1"
    from attn.integrations import vllm as attn_vllm

    assert attn_vllm.register()  # engines built from here on choose attn's backend
    engines["attn"] = LLM(**common)
    rows = []
    for batch in args.batches:
        for plen in args.prompts:
            prompts = [{"prompt_token_ids": [(7 * s + 13 * i) % 128000 + 1 for i in range(plen)]} for s in range(batch)]
            one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True, detokenize=False)
            many = SamplingParams(temperature=0.0, max_tokens=1 + args.new_tokens, ignore_eos=True, detokenize=False)
            for name, llm in engines.items():  # prefill once: later calls find the prompts cached
                before = calls[0]
                llm.generate(prompts, one, use_tqdm=False)
                if (calls[0] > before) != (name == "attn"):
                    raise SystemExit(f"the {name} engine ran {calls[0] - before} attn layer calls")
            times, attention = {name: [] for name in engines}, {name: [] for name in engines}
            for _ in range(args.runs):
                for name, llm in engines.items():
                    t0, a0 = time.perf_counter(), spent[0]
                    llm.generate(prompts, one, use_tqdm=False)
                    t1, a1 = time.perf_counter(), spent[0]
                    llm.generate(prompts, many, use_tqdm=False)
                    t2, a2 = time.perf_counter(), spent[0]
                    times[name].append((t2 - t1) - (t1 - t0))
                    attention[name].append(((a2 - a1) - (a1 - a0)) / args.new_tokens * 1e3)
            tps = {n: batch * args.new_tokens / statistics.median(t) for n, t in times.items()}
            ms = {n: statistics.median(t) for n, t in attention.items()}
            rows.append(dict(threads=args.threads[0], batch=batch, prompt=plen, attn=tps["attn"], cpu_attn=tps["CPU_ATTN"],
                             attn_attention_ms=ms["attn"], cpu_attn_attention_ms=ms["CPU_ATTN"]))
            print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--prompts", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--model", default=None, help="model directory (made when missing; default: one per layer count)")
    ap.add_argument("--kv-space-gib", type=int, default=6)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    args.model = args.model or str(Path(tempfile.gettempdir()) / f"attn-llama-3.2-1b-shaped-{args.layers}l")
    build_model(Path(args.model), args.layers)
    print(f"load average before: {os.getloadavg()}", flush=True)
    rows = []
    for threads in args.threads:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(threads),
                       VLLM_CPU_NUM_OF_RESERVED_CPU="0", VLLM_CPU_KVCACHE_SPACE=str(args.kv_space_gib))
            cmd = [sys.executable, __file__, "--worker", "--out", out.name, "--threads", str(threads), "--model", args.model,
                   "--new-tokens", str(args.new_tokens), "--runs", str(args.runs), "--batches", *map(str, args.batches),
                   "--prompts", *map(str, args.prompts)]
            subprocess.run(cmd, env=env, check=True, stdout=sys.stderr)
            rows += json.loads(Path(out.name).read_text())
    print(f"load average after: {os.getloadavg()}")
    print("tok/s: output tokens per second of decode; attention: ms per decode step in the engine's attention calls")
    print(f"{'threads':>7} {'batch':>5} {'prompt':>6} {'attn tok/s':>10} {'CPU_ATTN tok/s':>14} {'attn / CPU_ATTN':>15}"
          f" {'attention: attn':>16} {'CPU_ATTN':>9}")
    for r in rows:
        print(f"{r['threads']:>7} {r['batch']:>5} {r['prompt']:>6} {r['attn']:>10.1f} {r['cpu_attn']:>14.1f} "
              f"{r['attn'] / r['cpu_attn']:>14.2f}x {r['attn_attention_ms']:>13.1f} ms {r['cpu_attn_attention_ms']:>6.1f} ms")


if __name__ == "__main__":
    main()
