"""nvfp4 / nvfp4_4over6 caches (vLLM's NVFP4 KV cache: e2m1 codes, two per byte, with an e4m3 scale per
16 values under the per-tensor global scale): write_kv stores the bytes vLLM's formula gives (an
independent NumPy version), every CPU backend that serves them matches the reference on the values the
cache holds, attention stays near the unquantized one, and engine-owned uint8 tensors are used in place."""
import numpy as np
import pytest

import attn
from helpers import (NVFP4_DTYPES, assert_close, cosine_to_unquantized, make_batch, nvfp4_quantized, reference_attention, rounded,
                     valid_cpu_backends)


@pytest.mark.parametrize("kv", NVFP4_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_write_kv_stores_vllms_codes_and_block_scales(kv, dtype):
    rng = np.random.default_rng(8)
    d = 64
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=d, dtype=dtype, kv_cache_dtype=kv))
    cache = attn.KVCache(6, block_size=16, num_kv_heads=2, head_size=d, kv_cache_dtype=kv, layout="NHD")
    assert cache.dtype == "int8" and cache.kv_cache_dtype == kv
    cache.set_scales([0.5], [3.0])  # vLLM's k_scale / v_scale: the global scales
    k = rng.standard_normal((20, 2, d)) * rng.uniform(0.01, 30, (20, 2, 1))
    k[:, :, 3] += 8.0  # an outlier channel: its block of 16 takes a larger scale
    v = rng.standard_normal((20, 2, d))
    k[3, 1] = 0.0  # an all-zero vector: zero scales, zero codes
    import ml_dtypes
    np_dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
    k, v = k.astype(np_dtype), v.astype(np_dtype)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[4, 1]], cache=cache)
    layer.write_kv(k, v, cache, md)
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
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_every_backend_matches_the_reference_on_the_quantized_cache(kv, dtype):
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype=dtype, kv_cache_dtype=kv,
                           use_per_head_quant_scales=True)
    backends = valid_cpu_backends(cfg)
    assert "cpu_flash" in backends and "reference" in backends
    for backend in backends:
        layer = attn.Attention(cfg, backend)
        # Per-head global scales (vLLM's k_scale / v_scale, one per KV head here).
        b = make_batch(np.random.default_rng(12), layer, [70, 0, 1100], [1, 19, 2], kv_scale=[0.7, 1.9])
        assert b.cache.kv_cache_dtype == kv and b.cache.layout in ("NHD", "HND")
        out = layer.forward(b.q, b.cache, b.md)
        assert_close(np.asarray(out).astype(np.float64), b.reference(), dtype, "bfloat16", backend)


@pytest.mark.parametrize("kv", NVFP4_DTYPES)
@pytest.mark.parametrize("outlier_channel", [False, True])
def test_quality_against_the_unquantized_cache(kv, outlier_channel):
    # A scale per 16 values: outputs near the unquantized ones, an outlier channel kept in its own block.
    cos = cosine_to_unquantized(kv, outlier_channel)
    assert cos.mean() > 0.97 and cos.min() > 0.9, (cos.mean(), cos.min())


def test_nonfinite_values_warn_and_read_as_nan():
    layer = attn.Attention(attn.LayerConfig(num_heads=2, num_kv_heads=1, head_size=32, dtype="float32", kv_cache_dtype="nvfp4"))
    cache = layer.make_cache(2)
    k = np.ones((1, 1, 32), np.float32)
    k[0, 0, 5] = np.inf
    md = attn.BatchMetadata(context_lens=[0], query_lens=[1], block_ids=[[0]], cache=cache)
    with pytest.warns(RuntimeWarning, match=r"1 NaN / infinite values.* nvfp4 cache: a block of 16"):
        layer.write_kv(k, np.ones((1, 1, 32), np.float32), cache, md)
    row = cache.numpy().view(np.uint8)[0, 0, 0, 0]  # block 0, K, slot 0 / head 0 (NHD or HND)
    assert row[16] == 0x7F and row[17] != 0x7F  # the first block of 16 holds the infinity: NaN scale


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
    rng = np.random.default_rng(2)
    k = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    v = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    bs = layer.block_size
    md = attn.BatchMetadata(context_lens=[0], query_lens=[40], block_ids=[[3, 0, 2][: -(-40 // bs)]], cache=cache)
    layer.write_kv(k, v, cache, md)
    assert rows.abs().sum() > 0  # the engine's memory
    q = torch.from_numpy(rng.standard_normal((40, 8, 64)).astype(np.float32)).to(torch.bfloat16)
    out = layer.forward(q, cache, md)
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
