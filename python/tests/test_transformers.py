"""attn as a transformers attention implementation: small randomly initialised models (built from
configs, nothing downloaded) give the same logits and greedy tokens with "attn" as with "eager",
for Llama, Qwen2, Gemma-2 (sliding window + soft-cap) and gpt-oss (sinks) where the installed
transformers has them. scripts/setup.sh installs torch and transformers."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (scripts/setup.sh installs it)")

import attn.integrations.transformers  # noqa: E402,F401  (registers "attn")

SMALL = dict(vocab_size=128, hidden_size=256, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=256)
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    # A window shorter than the prompt and a soft-cap small enough to bend the logits.
    "gemma2": ("Gemma2Config", dict(sliding_window=8, attn_logit_softcapping=2.0, query_pre_attn_scalar=64)),
    "gpt_oss": ("GptOssConfig", dict(sliding_window=8, num_local_experts=4, num_experts_per_tok=2,
                                     layer_types=["sliding_attention", "full_attention"])),
}


def build(family: str, implementation: str):
    name, extra = FAMILIES[family]
    if not hasattr(transformers, name):
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    cfg = getattr(transformers, name)(**SMALL, **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=implementation, dtype=torch.float32)
    if family == "gpt_oss":  # sinks start at zero: make them matter
        for layer in model.model.layers:
            layer.self_attn.sinks.data.normal_(0, 1, generator=torch.Generator().manual_seed(1))
    return model.eval()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_and_greedy_tokens_match_eager(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    prompt = torch.randint(0, 128, (1, 21), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(prompt).logits, eager(prompt).logits, atol=2e-4, rtol=2e-4)
        kw = dict(max_new_tokens=12, do_sample=False)
        assert ours.generate(prompt, **kw).tolist() == eager.generate(prompt, **kw).tolist()


def test_padded_batch_matches_eager():
    eager, ours = build("llama", "eager"), build("llama", "attn")
    ids = torch.randint(0, 128, (2, 15), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padding of the shorter prompt
    with torch.no_grad():
        got, want = ours(ids, attention_mask=mask).logits, eager(ids, attention_mask=mask).logits
        torch.testing.assert_close(got[0, 6:], want[0, 6:], atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(got[1], want[1], atol=2e-4, rtol=2e-4)
        kw = dict(max_new_tokens=6, do_sample=False, attention_mask=mask)
        assert ours.generate(ids, **kw).tolist() == eager.generate(ids, **kw).tolist()


def test_training_falls_back_to_sdpa_with_gradients():
    model = build("llama", "attn").train()
    ids = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(4))
    model(ids, labels=ids).loss.backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
