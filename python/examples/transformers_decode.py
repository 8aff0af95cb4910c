"""Decode tokens/s of a transformers model: attn_implementation="attn" (on an AttnCache, attn's
paged caches written in place) vs "sdpa" with its default DynamicCache vs "sdpa" with StaticCache.

The model is Llama-3.2-1B-shaped and randomly initialised from a config (nothing downloaded): 16
layers, hidden 2048, 32 query / 8 KV heads of 64, MLP 8192, bfloat16. For each batch and context
the context is written once per implementation ("attn", and "sdpa" whose K/V StaticCache copies)
through every layer's attention on random hidden states (a prefill without the MLPs: decode speed
does not depend on them), with the most threads asked for; then, for each thread count, the
implementations take turns (interleaved runs, one warm-up run first) decoding --steps greedy
tokens, each run cropping its tokens off again, and each figure is the median of --runs runs. Time is wall time: run it alone on the machine (the load
average is printed before and after).

    python python/examples/transformers_decode.py [--layers 16] [--steps 8] [--threads 1 2]
        [--contexts 512 2048 8192] [--batches 1 4] [--runs 3]
"""
import argparse
import os
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="threads of torch and of attn's kernels")
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    p.add_argument("--runs", type=int, default=3)
    return p.parse_args()


# Both OpenMP runtimes (torch's and attn's) read this when they start, so it is set before import.
args = parse_args()
os.environ["OMP_NUM_THREADS"] = str(max(args.threads))
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.cache_utils import DynamicCache, StaticCache  # noqa: E402
from transformers.masking_utils import create_causal_mask  # noqa: E402

from attn.integrations.transformers import AttnCache  # noqa: E402

IMPLEMENTATIONS = ("attn", "sdpa", "sdpa+static")


def fill(model, cache, batch: int, ctx: int) -> None:
    """Writes a context of `ctx` tokens into `cache` through every layer's attention (projections,
    rotary embedding, cache update, attention), on random hidden states: a prefill without the MLPs,
    which the decode timed next does not depend on and which would take most of the prefill's time."""
    inner = model.model
    hidden = torch.randn(batch, ctx, inner.config.hidden_size, generator=torch.Generator().manual_seed(ctx),
                         dtype=torch.bfloat16)
    positions = torch.arange(ctx).unsqueeze(0).expand(batch, -1)
    mask = create_causal_mask(config=inner.config, inputs_embeds=hidden, attention_mask=None, cache=cache,
                              position_ids=positions)
    rotary = inner.rotary_emb(hidden, position_ids=positions)
    for layer in inner.layers:
        layer.self_attn(hidden_states=hidden, position_embeddings=rotary, attention_mask=mask, cache=cache)


def filled_caches(models, cfg, batch: int, ctx: int, steps: int) -> dict:
    """Each implementation's cache holding the same-shaped context (StaticCache copies sdpa's K/V)."""
    with torch.no_grad():
        ours = AttnCache(cfg)
        fill(models["attn"], ours, batch, ctx)
        dynamic = DynamicCache(config=cfg)
        fill(models["sdpa"], dynamic, batch, ctx)
        static = StaticCache(config=cfg, max_cache_len=ctx + steps + 1)
        for i, layer in enumerate(dynamic.layers):
            static.update(layer.keys, layer.values, i)
    return {"attn": ours, "sdpa": dynamic, "sdpa+static": static}


def decode_seconds(model, cache, token, steps: int) -> float:
    """Wall seconds per greedy decode step on `cache`; the steps are cropped off again."""
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(steps):
            out = model(token, cache=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        seconds = (time.perf_counter() - start) / steps
    cache.crop(-steps)
    return seconds


def main() -> None:
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
          f"weights; decode tokens/s (wall time), median of {args.runs} interleaved runs of {args.steps} "
          f"steps; load average {os.getloadavg()[0]:.2f}")
    print(f"{'threads':>7} {'batch':>5} {'context':>8} {'attn':>9} {'sdpa':>9} {'static':>9} {'attn/sdpa':>10} "
          f"{'attn/static':>12}")
    for batch in args.batches:
        for ctx in args.contexts:
            torch.set_num_threads(max(args.threads))
            caches = filled_caches(models, cfg, batch, ctx, args.steps)
            first = torch.zeros(batch, 1, dtype=torch.long)
            for threads in args.threads:
                torch.set_num_threads(threads)
                caches["attn"].num_threads = threads
                runs = {name: [] for name in models}
                for run in range(args.runs + 1):  # run 0 warms up (first calls of these shapes)
                    for name, model in models.items():
                        seconds = decode_seconds(model, caches[name], first, args.steps)
                        if run:
                            runs[name].append(seconds)
                tps = {name: batch / sorted(r)[len(r) // 2] for name, r in runs.items()}
                print(f"{threads:>7} {batch:>5} {ctx:>8} {tps['attn']:>9.1f} {tps['sdpa']:>9.1f} "
                      f"{tps['sdpa+static']:>9.1f} {tps['attn'] / tps['sdpa']:>10.2f} "
                      f"{tps['attn'] / tps['sdpa+static']:>12.2f}", flush=True)
            del caches
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
