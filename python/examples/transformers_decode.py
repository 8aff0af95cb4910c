"""Decode tokens/s of a transformers model with attn_implementation="attn" vs "sdpa", on the CPU.

The model is a randomly initialised Llama-style stack built from a config (nothing downloaded):
32 query / 8 KV heads of 128 (a Llama-3-8B layer's attention) on narrow projections, bfloat16,
a few layers. For each
context length: prefill once, then time greedy decode steps, interleaving the two implementations.
Time is this process's CPU time (all threads), which a loaded machine does not inflate the way it
does wall time; on an idle machine with --threads 1 the two agree.

    python python/examples/transformers_decode.py [--layers 2] [--steps 16] [--threads 1] [--contexts 512 2048 4096]
"""
import argparse
import os
import time


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="threads of torch and of attn's kernels")
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 4096])
    return p.parse_args()


# Both OpenMP runtimes (torch's and attn's) read this when they start, so it is set before import.
args = parse_args()
os.environ["OMP_NUM_THREADS"] = str(args.threads)
import torch  # noqa: E402
import transformers  # noqa: E402

import attn.integrations.transformers  # noqa: E402,F401  (registers "attn")


def decode_seconds(model, prompt, steps: int) -> float:
    """CPU seconds per decode step after a prefill of `prompt` (greedy, batch 1)."""
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        start = time.process_time()
        for _ in range(steps):
            out = model(token, cache=cache, use_cache=True)
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)
        return (time.process_time() - start) / steps


def main() -> None:
    torch.set_num_threads(args.threads)
    # Narrow projections (hidden 1024) so the attention over the context dominates each step.
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=1024, intermediate_size=256,
                                   num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=8,
                                   head_dim=128, max_position_embeddings=max(args.contexts) + args.steps + 1)
    models = {}
    for name in ("attn", "sdpa"):
        torch.manual_seed(0)
        models[name] = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=name,
                                                                     dtype=torch.bfloat16).eval()
    print(f"Llama-style, {args.layers} layers, 32q/8kv heads x 128, bfloat16, batch 1, "
          f"{args.threads} thread(s); decode tokens per CPU-second (median of 3 interleaved runs)")
    print(f"{'context':>8} {'attn':>10} {'sdpa':>10} {'attn/sdpa':>10}")
    for ctx in args.contexts:
        prompt = torch.randint(0, cfg.vocab_size, (1, ctx), generator=torch.Generator().manual_seed(ctx))
        runs = {name: [] for name in models}
        for _ in range(3):
            for name, model in models.items():
                runs[name].append(decode_seconds(model, prompt, args.steps))
        tps = {name: 1.0 / sorted(r)[1] for name, r in runs.items()}
        print(f"{ctx:>8} {tps['attn']:>10.1f} {tps['sdpa']:>10.1f} {tps['attn'] / tps['sdpa']:>10.2f}")


if __name__ == "__main__":
    main()
