"""Tensor-parallel shares from Python: the library's sharding rule, plans of one rank, stages."""
import pytest

import attn


def test_llama_kv_heads_split_then_replicated():
    cfg = attn.load_model("llama-3.1-8b").layers[0].attention  # 32 heads, 8 KV heads
    for tp, heads, kv, replicas in [(2, 16, 4, 1), (4, 8, 2, 1), (8, 4, 1, 1), (16, 2, 1, 2)]:
        s = attn.shard_heads(cfg, tp)
        assert (s.num_heads, s.num_kv_heads, s.kv_head_replicas) == (heads, kv, replicas)
        assert s.first_head(tp - 1) == 32 - heads
        assert s.first_kv_head(tp - 1) == 8 - kv
        part = attn.shard_layer_config(cfg, tp)
        assert (part.num_heads, part.num_kv_heads, part.head_size) == (heads, kv, 128)


def test_heads_that_do_not_divide_raise_naming_the_values():
    with pytest.raises(ValueError, match="tensor_parallel=8 invalid: expected a divisor of num_heads=28"):
        attn.plan("qwen2.5-7b", tensor_parallel=8)


def test_plan_of_one_rank():
    p = attn.plan("deepseek-v3", tensor_parallel=8)
    assert p.tensor_parallel == 8 and p.to_dict()["tensor_parallel"] == 8
    layer = p.layers[0]
    assert layer.config.num_heads == 16 and layer.config.use_mla
    assert layer.sharding.kv_head_replicas == 8  # the latent cache is whole on every rank
    assert "one of 8 tensor-parallel ranks" in repr(p)
    assert not any(l.decision.slow_path for l in p.layers)
    ranked = attn.shard_model(attn.load_model("llama-3.1-8b"), 4)
    assert all(l.attention.num_kv_heads == 2 for l in ranked.layers)


def test_pipeline_stages_follow_vllm():
    assert attn.pipeline_stages(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]
    with pytest.raises(ValueError, match="pipeline_parallel=5"):
        attn.pipeline_stages(4, 5)


def test_slow_reference_path_is_marked():
    d = attn.select(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=300, dtype="float32"))
    assert d.backend == "reference" and "no production backend" in d.slow_path
    assert d.to_dict()["slow_path"] == d.slow_path
    assert not attn.select(attn.LayerConfig(num_heads=32, num_kv_heads=8, head_size=128, dtype="bfloat16")).slow_path
