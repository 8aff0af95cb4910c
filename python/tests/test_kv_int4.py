"""int4_per_token_head caches (vLLM's format: a randomized Hadamard rotation, then 4-bit codes with a
scale and a zero point per (token, KV head), two codes per byte): write_kv stores the bytes vLLM's
formula gives (an independent NumPy version with torch's RHT signs), attention over them is near
the unquantized one, and engine-owned uint8 codes with float32 scale tensors are read and written in
place. (Every CPU backend against the reference on such a cache: test_kv_dtypes.py.)"""
import numpy as np
import pytest

import attn
from helpers import assert_close, cosine_to_unquantized
from kv_formats import int4_quantized, int4_query, rounded

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it): vLLM's RHT signs come from it")

KV = "int4_per_token_head"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_write_kv_stores_vllms_codes_and_scales(dtype):
    rng = np.random.default_rng(6)
    d = 64
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=d, dtype=dtype, kv_cache_dtype=KV))
    cache = attn.KVCache(6, block_size=16, num_kv_heads=2, head_size=d, kv_cache_dtype=KV, layout="NHD")
    k = rng.standard_normal((20, 2, d)) * rng.uniform(0.01, 30, (20, 2, 1))
    k[:, :, 3] += 8.0  # an outlier channel
    v = rng.standard_normal((20, 2, d))
    k[3, 1] = 0.0  # an all-zero vector: the 1e-6 floor
    np_dtype = {"float32": np.float32, "bfloat16": attn_bf16()}[dtype]
    k, v = k.astype(np_dtype), v.astype(np_dtype)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[4, 1]], cache=cache)
    layer.write_kv(k, v, cache, md)
    codes = torch.from_dlpack(cache).numpy()  # uint8 [blocks, 2, block_size, heads, head_size / 2]
    assert codes.dtype == np.uint8 and codes.shape == (6, 2, 16, 2, d // 2)
    ks, vs = cache.token_scales()
    for t in range(20):
        blk, off = [4, 1][t // 16], t % 16
        for x, which, scales in ((k, 0, ks), (v, 1, vs)):
            _, want_codes, want_scale = int4_quantized(rounded(x[t], dtype), dtype)
            np.testing.assert_array_equal(scales[blk, off].view(np.uint32), want_scale[:, 0].view(np.uint32))
            np.testing.assert_array_equal(codes[blk, which, off], want_codes)
    zero_bits = ks[4, 3, 1:2].view(np.uint32)[0]
    assert zero_bits & 0xF == 0 and abs(float(np.uint32(zero_bits & ~np.uint32(0xF)).view(np.float32)) - 1e-6) < 2e-12


def attn_bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


def test_quality_against_the_unquantized_cache():
    # 4 bits per value after the rotation: attention outputs near the unquantized ones, also with an
    # outlier channel in K (the rotation spreads it over every dim).
    cos = cosine_to_unquantized(KV, outlier_channel=True)
    # 16 levels per vector: a few percent of error per output row (rms over 600 keys' weights).
    assert cos.mean() > 0.97 and cos.min() > 0.85, (cos.mean(), cos.min())


def test_engine_owned_uint8_codes_and_scales_are_used_in_place():
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype=KV)
    layer = attn.Attention(cfg)
    blocks, bs = 5, layer.block_size
    shape = layer.kv_cache_shape(blocks)  # HND_PAIRS where cpu_flash's decode kernel reads them (attn's byte order)
    assert shape[-1] == 32
    codes = torch.zeros(shape, dtype=torch.uint8)
    ks = torch.zeros((blocks, bs, 2), dtype=torch.float32)
    vs = torch.zeros_like(ks)
    cache = attn.KVCache.from_dlpack(codes, layout=layer.kv_cache_layout, k_scales=ks, v_scales=vs)
    assert cache.kv_cache_dtype == KV and not cache.owns_storage and cache.head_size == 64
    rng = np.random.default_rng(2)
    k = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    v = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    blk = [3, 0, 2]
    md = attn.BatchMetadata(context_lens=[0], query_lens=[40], block_ids=[blk[: -(-40 // bs)]], cache=cache)
    layer.write_kv(k, v, cache, md)
    assert cache.token_scales()[0].ctypes.data == ks.data_ptr()
    held_k, _, want_k = int4_quantized(k.float().numpy(), "bfloat16")
    held_v, _, _ = int4_quantized(v.float().numpy(), "bfloat16")
    for t in range(40):
        np.testing.assert_array_equal(ks.numpy()[blk[t // bs], t % bs].view(np.uint32), want_k[t, :, 0].view(np.uint32))
    q = torch.from_numpy(rng.standard_normal((40, 8, 64)).astype(np.float32)).to(torch.bfloat16)
    out = layer.forward(q, cache, md)
    from helpers import reference_attention
    want = reference_attention(int4_query(q.float().numpy(), "bfloat16"), [held_k], [held_v], query_lens=[40], seq_lens=[40],
                               scale=layer.scale)
    assert_close(out.float().numpy().astype(np.float64), want, "bfloat16", "int8", "cpu_flash over torch uint8 codes")


def test_bad_int4_tensors_are_refused():
    codes = torch.zeros((2, 2, 16, 1, 48), dtype=torch.uint8)  # head_size 96: no Hadamard transform
    ks = torch.zeros((2, 16, 1), dtype=torch.float32)
    with pytest.raises(attn.Error, match="head_size=96.*power of two"):
        attn.KVCache.from_dlpack(codes, layout="NHD", k_scales=ks, v_scales=ks.clone())
    with pytest.raises(attn.Error, match="k_scales=None"):
        attn.KVCache.from_dlpack(torch.zeros((2, 2, 16, 1, 32), dtype=torch.uint8), layout="NHD")
