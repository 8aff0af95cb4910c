"""turboquant_* caches (vLLM's TurboQuant: one slot per token and KV head, K as Lloyd-Max indices of the
Hadamard-rotated unit vector with its fp16 norm, or fp8 codes; V uniform with an fp16 scale and minimum):
write_kv stores the bytes vLLM's store gives (an independent NumPy version), attention stays near the unquantized one, and an engine's
uint8 tensor in vLLM's slot shape is used in place."""
import numpy as np
import pytest

import attn
from helpers import assert_close, cosine_to_unquantized, reference_attention, torch_step, written_cache
from kv_formats import TURBOQUANT_DTYPES, rounded, turboquant_slot


@pytest.mark.parametrize("kv", TURBOQUANT_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_write_kv_stores_vllms_slots(kv, dtype):
    def edit(k, v):
        v *= 3
        v[3, 1] = 0.5  # a constant vector: the scale floor

    cache, k, v = written_cache(kv, dtype, "HND", 4, edit)
    slots = cache.numpy().view(np.uint8)  # vLLM's [num_blocks, num_kv_heads, block_size, slot]
    want, _, _ = turboquant_slot(rounded(k, dtype), rounded(v, dtype), kv)
    assert slots.shape == (6, 2, 16, want.shape[-1])
    for t in range(20):
        blk, off = [4, 1][t // 16], t % 16
        for h in range(2):
            np.testing.assert_array_equal(slots[blk, h, off], want[t, h], err_msg=f"t={t} h={h}")


@pytest.mark.parametrize("kv", TURBOQUANT_DTYPES)
def test_quality_against_the_unquantized_cache(kv):
    cos = cosine_to_unquantized(kv, outlier_channel=False)
    floor = {"turboquant_k8v4": 0.99, "turboquant_4bit_nc": 0.97, "turboquant_k3v4_nc": 0.96, "turboquant_3bit_nc": 0.9}[kv]
    assert cos.mean() > floor and cos.min() > floor - 0.1, (cos.mean(), cos.min())


def test_sizes_the_format_cannot_hold_are_refused():
    with pytest.raises(attn.Error, match=r"head_size=96.*a power of two >= 8 for kv_cache_dtype turboquant_4bit_nc"):
        attn.KVCache(2, block_size=16, num_kv_heads=1, head_size=96, kv_cache_dtype="turboquant_4bit_nc")
    with pytest.raises(attn.Error, match=r"head_size_v=32.*K and V share a slot"):
        attn.KVCache(2, block_size=16, num_kv_heads=1, head_size=64, head_size_v=32, kv_cache_dtype="turboquant_k8v4")


torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")


@pytest.mark.parametrize("kv", ["turboquant_k8v4", "turboquant_3bit_nc"])
def test_engine_owned_uint8_slots_are_used_in_place(kv):
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype=kv)
    layer = attn.Attention(cfg)
    blocks = 5
    shape = layer.kv_cache_shape(blocks)
    slot = turboquant_slot(np.zeros((1, 64)), np.zeros((1, 64)), kv)[0].shape[-1]
    assert tuple(shape) == (blocks, 2, layer.block_size, slot)  # vLLM's TurboQuant shape, HND
    slots = torch.zeros(shape, dtype=torch.uint8)
    cache = attn.KVCache.from_dlpack(slots, layout=layer.kv_cache_layout, kv_cache_dtype=kv)
    assert cache.kv_cache_dtype == kv and not cache.owns_storage and cache.head_size == 64
    k, v, q, out, blk = torch_step(layer, cache)
    want, kd, vd = turboquant_slot(k.float().numpy(), v.float().numpy(), kv)
    bs = layer.block_size
    for t in range(40):
        np.testing.assert_array_equal(slots.numpy()[blk[t // bs], :, t % bs], want[t])  # the engine's memory
    ref = reference_attention(q.float().numpy().astype(np.float64), [kd], [vd], query_lens=[40], seq_lens=[40],
                              scale=layer.scale)
    assert_close(out.float().numpy().astype(np.float64), ref, "bfloat16", "float32", "cpu_flash on the engine's slots")
    with pytest.raises(attn.Error, match=r"slot size of a head size"):
        attn.KVCache.from_dlpack(torch.zeros((*shape[:-1], 7), dtype=torch.uint8), layout=layer.kv_cache_layout,
                                 kv_cache_dtype=kv)
