"""attn as a transformers attention implementation: small randomly initialised models (built from
configs, nothing downloaded) give the same logits and greedy tokens with "attn" as with "eager",
for Llama, Qwen2, Qwen3, Mistral (window), Phi-3, Gemma-2 (sliding window + soft-cap) and gpt-oss
(sinks) where the installed transformers has them; generate runs on an AttnCache (attn's paged
caches, written in place) through greedy decoding, sampling, left-padded batches, beam search, crop
and several generate calls on one cache, each family in fp32 (logits within 1e-4 of "eager") and
bf16 (no further from fp32 than "eager" in bf16). scripts/setup.sh installs torch and transformers."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (scripts/setup.sh installs it)")

import attn  # noqa: E402
import attn.integrations.transformers  # noqa: E402,F401  (registers "attn")
from attn.integrations.transformers import AttnCache  # noqa: E402

SMALL = dict(vocab_size=128, hidden_size=256, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=256)
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    # A window shorter than the prompt and a soft-cap small enough to bend the logits.
    "gemma2": ("Gemma2Config", dict(sliding_window=8, attn_logit_softcapping=2.0, query_pre_attn_scalar=64)),
    "gpt_oss": ("GptOssConfig", dict(sliding_window=8, num_local_experts=4, num_experts_per_tok=2,
                                     layer_types=["sliding_attention", "full_attention"])),
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", dict(sliding_window=8)),
    "phi3": ("Phi3Config", dict(pad_token_id=0)),
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
        assert (ours(prompt).logits - eager(prompt).logits).abs().max().item() <= 1e-4
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


def _generate(model, ids, **kw):
    with torch.no_grad():
        return model.generate(ids, do_sample=False, **kw).tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generate_runs_on_an_attn_cache(family, monkeypatch):
    eager, ours = build(family, "eager"), build(family, "attn")
    made = []
    init = AttnCache.__init__
    monkeypatch.setattr(AttnCache, "__init__", lambda self, *a, **k: (made.append(self), init(self, *a, **k))[1])
    prompt = torch.randint(0, 128, (1, 21), generator=torch.Generator().manual_seed(2))
    assert _generate(ours, prompt, max_new_tokens=12) == _generate(eager, prompt, max_new_tokens=12)
    assert len(made) == 1 and made[0].get_seq_length() == 21 + 11 and made[0].memory_bytes > 0


@pytest.mark.parametrize("family", list(FAMILIES))
def test_attn_cache_prefill_then_decode_logits_match_eager(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    ids = torch.randint(0, 128, (2, 17), generator=torch.Generator().manual_seed(5))
    cache = AttnCache()
    with torch.no_grad():
        first = ours(ids[:, :13], cache=cache, use_cache=True).logits
        rest, buffers = [], set()
        for t in range(13, 17):
            rest.append(ours(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
            buffers.add(tuple(layer.decode_out.data_ptr() for layer in cache._layers.values()))
        want = eager(ids).logits
    got = torch.cat([first] + rest, dim=1)
    assert (got - want).abs().max().item() <= 1e-4
    assert cache.get_seq_length() == 17
    assert len(buffers) == 1  # decode steps write each layer's output into the same buffer


@pytest.mark.parametrize("family", list(FAMILIES))
def test_left_padded_batch_of_three_on_an_attn_cache(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    ids = torch.randint(1, 128, (3, 14), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    mask[2, :9] = 0
    kw = dict(max_new_tokens=8, attention_mask=mask, pad_token_id=0)
    assert _generate(ours, ids, **kw) == _generate(eager, ids, **kw)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_beam_search_with_two_beams(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    ids = torch.randint(0, 128, (1, 11), generator=torch.Generator().manual_seed(7))
    kw = dict(max_new_tokens=8, num_beams=2, num_return_sequences=2)
    assert _generate(ours, ids, **kw) == _generate(eager, ids, **kw)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_crop_then_continue_matches_eager(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(8))
    cache = AttnCache()
    with torch.no_grad():
        ours(ids, cache=cache, use_cache=True)
        cache.crop(-6)  # drop the last 6 tokens, as assisted decoding does after a rejection
        assert cache.get_seq_length() == 14
        got = ours(ids[:, 14:], cache=cache, use_cache=True).logits
        want = eager(ids).logits[:, 14:]
    assert (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", list(FAMILIES))
def test_sampling_draws_the_same_tokens_as_eager(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(11))
    kw = dict(max_new_tokens=10, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    drawn = []
    for model in (ours, eager):
        torch.manual_seed(12)  # the same random stream: equal probabilities draw equal tokens
        with torch.no_grad():
            drawn.append(model.generate(ids, **kw).tolist())
    assert drawn[0] == drawn[1]


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
def test_several_generate_calls_continue_one_cache(family):
    eager, ours = build(family, "eager"), build(family, "attn")
    prompt = torch.randint(0, 128, (1, 13), generator=torch.Generator().manual_seed(13))
    cache = AttnCache()
    with torch.no_grad():
        first = ours.generate(prompt, cache=cache, max_new_tokens=5, do_sample=False)
        held = cache.get_seq_length()  # the last new token is not in the cache yet
        second = ours.generate(first, cache=cache, max_new_tokens=6, do_sample=False)
        want = eager.generate(prompt, max_new_tokens=11, do_sample=False)
    assert held == 13 + 4 and cache.get_seq_length() == 13 + 10
    assert second.tolist() == want.tolist()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bfloat16_on_an_attn_cache_is_as_close_to_fp32_as_eager_bfloat16(family):
    """bf16 weights and activations: attn on an AttnCache (prefill, then decode steps) against the
    fp32 eager model, no further from it than eager itself in bf16 (each layer rounds to bf16 in
    both; attn's kernel keeps its fp32 accumulation and rounds P to bf16, within the tolerance table
    per call)."""
    fp32 = build(family, "eager")
    eager, ours = build(family, "eager").to(torch.bfloat16), build(family, "attn").to(torch.bfloat16)
    ids = torch.randint(0, 128, (2, 19), generator=torch.Generator().manual_seed(9))
    cache = AttnCache()
    with torch.no_grad():
        steps = [ours(ids[:, :15], cache=cache, use_cache=True).logits]
        steps += [ours(ids[:, t:t + 1], cache=cache, use_cache=True).logits for t in range(15, 19)]
        got = torch.cat(steps, dim=1).float()
        exact, rounded = fp32(ids).logits, eager(ids).logits.float()
    scale = exact.abs().max().item()
    ours_err, eager_err = (got - exact).abs().max().item(), (rounded - exact).abs().max().item()
    assert ours_err <= 2 * eager_err + 1.2e-2 * scale, (ours_err, eager_err, scale)


def test_thread_count_changes_between_steps_and_bad_counts_are_named():
    eager, ours = build("gemma2", "eager"), build("gemma2", "attn")
    ids = torch.randint(0, 128, (2, 15), generator=torch.Generator().manual_seed(10))
    cache = AttnCache(num_threads=1)
    with torch.no_grad():
        logits = [ours(ids[:, :12], cache=cache, use_cache=True).logits]
        for t, threads in zip(range(12, 15), (2, 0, 1)):
            cache.num_threads = threads
            assert cache.num_threads == threads
            logits.append(ours(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
        want = eager(ids).logits
    assert (torch.cat(logits, dim=1) - want).abs().max().item() <= 1e-4
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(attn.Error, match="num_threads="):
            cache.num_threads = bad
