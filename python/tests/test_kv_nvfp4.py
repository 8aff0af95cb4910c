"""nvfp4 / nvfp4_4over6 caches (vLLM's NVFP4 KV cache: e2m1 codes, two per byte, with an e4m3 scale per
16 values under the per-tensor global scale): write_kv stores the bytes vLLM's formula gives (an
independent NumPy version), attention stays near the unquantized one, and engine-owned uint8 tensors are used in place."""
import numpy as np
import pytest

import attn
from helpers import assert_close, cosine_to_unquantized, reference_attention, torch_step, written_cache
from kv_formats import NVFP4_DTYPES, nvfp4_quantized, rounded


@pytest.mark.parametrize("kv", NVFP4_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_write_kv_stores_vllms_codes_and_block_scales(kv, dtype):
    d = 64

    def edit(k, v):
        k[:, :, 3] += 8.0  # an outlier channel: its block of 16 takes a larger scale
        k[3, 1] = 0.0  # an all-zero vector: zero scales, zero codes

    # vLLM's k_scale / v_scale: the global scales
    cache, k, v = written_cache(kv, dtype, "NHD", 8, edit, scales=(0.5, 3.0), d=d)
    rows = cache.numpy().view(np.uint8)  # [blocks, 2, block_size, heads, d / 2 + d / 16]
    assert rows.shape == (6, 2, 16, 2, d // 2 + d // 16)
    for t in range(20):
        blk, off = [4, 1][t // 16], t % 16
        for x, which, g in ((k, 0, 0.5), (v, 1, 3.0)):
            want = nvfp4_quantized(rounded(x[t], dtype), g, kv == "nvfp4_4over6")[1]
            np.testing.assert_array_equal(rows[blk, which, off], want, err_msg=f"t={t} {'kv'[which]}")
    assert not rows[4, 0, 3, 1].any()


def test_four_over_six_reconstructs_better():
    # nvfp4_4over6 picks, per block, the scale with the smaller squared error: never worse than nvfp4.
    x = np.random.default_rng(1).standard_normal((400, 128)) * np.random.default_rng(2).uniform(0.1, 10, (400, 1))
    err = {four: ((nvfp4_quantized(x, 1.0, four)[0] - x.astype(np.float32)) ** 2).sum() for four in (False, True)}
    assert err[True] < 0.95 * err[False], err


@pytest.mark.parametrize("kv", NVFP4_DTYPES)
@pytest.mark.parametrize("outlier_channel", [False, True])
def test_quality_against_the_unquantized_cache(kv, outlier_channel):
    # A scale per 16 values: outputs near the unquantized ones, an outlier channel kept in its own block.
    cos = cosine_to_unquantized(kv, outlier_channel)
    assert cos.mean() > 0.97 and cos.min() > 0.9, (cos.mean(), cos.min())


torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")


def test_engine_owned_uint8_rows_are_used_in_place():
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype="nvfp4")
    layer = attn.Attention(cfg)
    blocks = 5
    shape = layer.kv_cache_shape(blocks)
    assert shape[-1] == 64 // 2 + 64 // 16
    rows = torch.zeros(shape, dtype=torch.uint8)
    cache = attn.KVCache.from_dlpack(rows, layout=layer.kv_cache_layout, kv_cache_dtype="nvfp4")
    assert cache.kv_cache_dtype == "nvfp4" and not cache.owns_storage and cache.head_size == 64
    cache.set_scales([2.0], [0.5])
    k, v, q, out, _ = torch_step(layer, cache)
    assert rows.abs().sum() > 0  # the engine's memory
    kd = nvfp4_quantized(k.float().numpy(), 2.0)[0]
    vd = nvfp4_quantized(v.float().numpy(), 0.5)[0]
    want = reference_attention(q.float().numpy().astype(np.float64), [kd], [vd], query_lens=[40], seq_lens=[40],
                               scale=layer.scale)
    assert_close(out.float().numpy().astype(np.float64), want, "bfloat16", "bfloat16", "cpu_flash on the engine's rows")
    with pytest.raises(attn.Error, match=r"kv_cache_dtype=nvfp4.*uint8"):
        attn.KVCache.from_dlpack(torch.zeros(shape, dtype=torch.bfloat16), layout=layer.kv_cache_layout, kv_cache_dtype="nvfp4")
    with pytest.raises(attn.Error, match=r"multiple of 9"):
        attn.KVCache.from_dlpack(torch.zeros((*shape[:-1], 35), dtype=torch.uint8), layout=layer.kv_cache_layout,
                                 kv_cache_dtype="nvfp4")
