"""attn inside a real vllm.LLM engine on CPU, loaded by its entry point (no manual step): small
random-weight models built here (nothing from a hub), greedy generation with attn and with vLLM's
own CPU_ATTN (ATTN_VLLM=0) on the same prompts. fp32: the same tokens, log-probabilities within
1e-3; bf16: log-probabilities within the bf16 tolerance where the tokens agree."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

HERE = Path(__file__).resolve().parent
PROMPT_LENS = (5, 37, 70)  # inside one block, across blocks, past the sliding window


def _save(model_cls, config, path: Path) -> Path:
    torch.manual_seed(0)
    model = model_cls(config).to(torch.float32)
    with torch.no_grad():  # wide enough weights that greedy choices are not near-ties
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    llama = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                     max_position_embeddings=512, tie_word_embeddings=False)
    gemma2 = transformers.Gemma2Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=16,
                                       attn_logit_softcapping=20.0, final_logit_softcapping=30.0,
                                       query_pre_attn_scalar=32, max_position_embeddings=512)
    return {"llama": _save(transformers.LlamaForCausalLM, llama, root / "llama"),
            "gemma2": _save(transformers.Gemma2ForCausalLM, gemma2, root / "gemma2")}


def _prompts() -> list[list[int]]:
    rng = random.Random(7)
    return [[rng.randrange(1, 512) for _ in range(n)] for n in PROMPT_LENS]


def _generate(model: Path, dtype: str, use_attn: bool, tmp: Path, layout: str = "pairs") -> tuple[dict, str]:
    prompts, out = tmp / "prompts.json", tmp / f"out-{use_attn}.json"
    prompts.write_text(json.dumps(_prompts()))
    # fp32 caches are read in vLLM's canonical content, bf16 ones as attn's pairs blocks (the default)
    # unless `layout` asks for the canonical content.
    env = dict(os.environ, ATTN_VLLM="1" if use_attn else "0", VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="INFO",
               ATTN_VLLM_KV_LAYOUT=layout)
    r = subprocess.run([sys.executable, str(HERE / "generate.py"), str(model), dtype, str(prompts), str(out)], env=env,
                       capture_output=True, text=True, timeout=900)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:]
    return json.loads(out.read_text()), log


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_generate_fp32_equals_cpu_attn(models, family, tmp_path):
    ours, log = _generate(models[family], "float32", True, tmp_path)
    assert "attn serves" in log, log[-4000:]  # the entry point loaded attn in the engine's process
    assert "leaves" not in log, log[-4000:]   # every attention layer on attn
    theirs, log_cpu = _generate(models[family], "float32", False, tmp_path)
    assert "attn serves" not in log_cpu
    assert ours["tokens"] == theirs["tokens"]
    for a, b in zip(ours["logprobs"], theirs["logprobs"]):
        assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-3, (a, b)


@pytest.mark.parametrize("family,layout", [("llama", "pairs"), ("gemma2", "pairs"), ("llama", "canonical")])
def test_generate_bf16_within_tolerance(models, family, layout, tmp_path):
    ours, log = _generate(models[family], "bfloat16", True, tmp_path, layout)
    assert "attn serves" in log, log[-4000:]
    assert "leaves" not in log, log[-4000:]
    theirs, _ = _generate(models[family], "bfloat16", False, tmp_path)
    for ta, tb, la, lb in zip(ours["tokens"], theirs["tokens"], ours["logprobs"], theirs["logprobs"]):
        agree = 0
        while agree < len(ta) and ta[agree] == tb[agree]:
            agree += 1
        assert agree >= 1, (ta, tb)  # the first token follows from the same prompt
        # Until the first divergence both runs see the same context: bf16 rounding apart.
        assert max(abs(x - y) for x, y in zip(la[:agree], lb[:agree])) <= 0.05, (la, lb)
