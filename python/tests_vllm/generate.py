"""Greedy generation through vllm.LLM on a local model, as a subprocess of the tests (attn's plugin
registers per process; ATTN_VLLM=0 in the environment gives vLLM's own CPU_ATTN).

    python generate.py MODEL_DIR DTYPE PROMPTS_JSON OUT_JSON [MAX_TOKENS]

Writes {"tokens": [[...] per prompt], "logprobs": [[...] per prompt]}: the greedy tokens and
their log-probabilities."""
import json
import sys


def main() -> None:
    model, dtype, prompts_file, out_file = sys.argv[1:5]
    max_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 12
    from vllm import LLM, SamplingParams

    prompts = json.load(open(prompts_file))
    llm = LLM(model=model, dtype=dtype, max_model_len=512, block_size=32, enforce_eager=True, seed=0, skip_tokenizer_init=True,
              max_num_seqs=8, gpu_memory_utilization=0.5)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=1, ignore_eos=True, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    logprobs = [[float(step[t].logprob) for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)] for o in outs]
    json.dump({"tokens": tokens, "logprobs": logprobs}, open(out_file, "w"))


if __name__ == "__main__":
    main()
