"""Decode tokens/s of a transformers model: attn_implementation="attn" (on an AttnCache, attn's
paged caches written in place) vs "sdpa" with its default DynamicCache vs "sdpa" with StaticCache.

The model is Llama-3.2-1B-shaped and randomly initialised from a config (nothing downloaded): 16
layers, hidden 2048, 32 query / 8 KV heads of 64, MLP 8192, bfloat16. For each context and batch:
prefill once per implementation, then time greedy decode steps; the implementations take turns
(interleaved runs) and each figure is the median of --runs runs. Time is this process's CPU time,
which a loaded machine does not inflate the way it does wall time; the load average is printed.

    python python/examples/transformers_decode.py [--layers 16] [--steps 8] [--threads 1]
        [--contexts 512 2048 8192] [--batches 1 4] [--runs 3]
"""
import argparse
import os
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="threads of torch and of attn's kernels")
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    p.add_argument("--runs", type=int, default=3)
    return p.parse_args()


# Both OpenMP runtimes (torch's and attn's) read this when they start, so it is set before import.
args = parse_args()
os.environ["OMP_NUM_THREADS"] = str(args.threads)
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.cache_utils import DynamicCache, StaticCache  # noqa: E402

from attn.integrations.transformers import AttnCache  # noqa: E402

IMPLEMENTATIONS = ("attn", "sdpa", "sdpa+static")


def new_cache(name: str, cfg, max_len: int):
    if name == "attn":
        return AttnCache(cfg)
    if name == "sdpa":
        return DynamicCache(config=cfg)
    return StaticCache(config=cfg, max_cache_len=max_len)


def decode_seconds(model, cfg, name: str, prompt, steps: int) -> float:
    """CPU seconds per decode step after a prefill of `prompt` (greedy)."""
    cache = new_cache(name, cfg, prompt.shape[1] + steps + 1)
    with torch.no_grad():
        out = model(prompt, cache=cache, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        start = time.process_time()
        for _ in range(steps):
            out = model(token, cache=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        return (time.process_time() - start) / steps


def main() -> None:
    torch.set_num_threads(args.threads)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
                                   head_dim=64, max_position_embeddings=max(args.contexts) + args.steps + 2)
    models = {}
    for name in IMPLEMENTATIONS:
        torch.manual_seed(0)
        impl = "attn" if name == "attn" else "sdpa"
        models[name] = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl,
                                                                     dtype=torch.bfloat16).eval()
    print(f"Llama-3.2-1B-shaped ({args.layers} layers, hidden 2048, 32q/8kv x 64, MLP 8192), bfloat16, random "
          f"weights, {args.threads} thread(s); decode tokens/s per CPU-second, median of {args.runs} interleaved runs; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'batch':>5} {'context':>8} {'attn':>9} {'sdpa':>9} {'static':>9} {'attn/sdpa':>10} {'attn/static':>12}")
    for batch in args.batches:
        for ctx in args.contexts:
            prompt = torch.randint(0, cfg.vocab_size, (batch, ctx), generator=torch.Generator().manual_seed(ctx))
            runs = {name: [] for name in models}
            for _ in range(args.runs):
                for name, model in models.items():
                    runs[name].append(decode_seconds(model, cfg, name, prompt, args.steps))
            tps = {name: batch / sorted(r)[len(r) // 2] for name, r in runs.items()}
            print(f"{batch:>5} {ctx:>8} {tps['attn']:>9.1f} {tps['sdpa']:>9.1f} {tps['sdpa+static']:>9.1f} "
                  f"{tps['attn'] / tps['sdpa']:>10.2f} {tps['attn'] / tps['sdpa+static']:>12.2f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
