"""Per-token-head KV caches (vLLM's int8_per_token_head / fp8_per_token_head): the codes and scales
write_kv stores are vLLM's (checked against an independent NumPy quantizer), every CPU backend that
serves them (and the int4, NVFP4 and TurboQuant caches) matches the reference on the values the
cache holds, and engine-owned torch tensors
(int8 / float8 codes plus float32 [num_blocks, block_size, num_kv_heads] scales) are read and
written in place."""
import numpy as np
import pytest

import attn
from helpers import assert_close, make_batch, valid_cpu_backends
from kv_formats import NVFP4_DTYPES, TOKEN_HEAD_DTYPES, TURBOQUANT_DTYPES, token_head_quantized

STORAGE = {"int8_per_token_head": "int8", "fp8_per_token_head": "fp8_e4m3", "int4_per_token_head": "int8",
           **{k: "int8" for k in NVFP4_DTYPES + TURBOQUANT_DTYPES}}


@pytest.mark.parametrize("kv", TOKEN_HEAD_DTYPES + ("int4_per_token_head",) + NVFP4_DTYPES + TURBOQUANT_DTYPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_every_backend_matches_the_reference_on_the_quantized_cache(kv, dtype):
    if kv == "int4_per_token_head":  # its expected values use vLLM's RHT signs, drawn with torch
        pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")
    nvfp4 = kv in NVFP4_DTYPES  # with per-head global scales (vLLM's k_scale / v_scale, one per KV head)
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype=dtype, kv_cache_dtype=kv,
                           use_per_head_quant_scales=nvfp4)
    backends = valid_cpu_backends(cfg)
    assert "cpu_flash" in backends and "reference" in backends
    for backend in backends:
        layer = attn.Attention(cfg, backend)
        b = make_batch(np.random.default_rng(11), layer, [70, 0, 1100], [1, 19, 2], kv_scale=[0.7, 1.9] if nvfp4 else None)
        assert b.cache.dtype == STORAGE[kv] and b.cache.kv_cache_dtype == kv
        out = layer.forward(b.q, b.cache, b.md)
        assert_close(np.asarray(out).astype(np.float64), b.reference(), dtype, b.cache.dtype, backend)


@pytest.mark.parametrize("kv", TOKEN_HEAD_DTYPES)
def test_write_kv_stores_vllms_codes_and_scales(kv):
    rng = np.random.default_rng(5)
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=48, dtype="float32", kv_cache_dtype=kv))
    cache = attn.KVCache(6, block_size=16, num_kv_heads=2, head_size=48, kv_cache_dtype=kv, layout="NHD")
    k = (rng.standard_normal((20, 2, 48)) * rng.uniform(0.01, 30, (20, 2, 1))).astype(np.float32)
    v = rng.standard_normal((20, 2, 48)).astype(np.float32)
    k[3, 1] = 0.0  # an all-zero vector: the 1e-6 floor
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[4, 1]], cache=cache)
    layer.write_kv(k, v, cache, md)
    codes = cache.numpy()  # [blocks, 2, block_size, heads, head_size], NHD as vLLM lays it out
    ks, vs = cache.token_scales()
    assert ks.shape == (6, 16, 2) and ks.dtype == np.float32
    for t in range(20):
        blk, off = [4, 1][t // 16], t % 16
        for x, which, scales in ((k, 0, ks), (v, 1, vs)):
            _, want_codes, want_scale = token_head_quantized(x[t], STORAGE[kv])
            np.testing.assert_array_equal(scales[blk, off], want_scale[:, 0])
            got = codes[blk, which, off]
            if kv == "int8_per_token_head":
                np.testing.assert_array_equal(got, want_codes)
            else:  # the same fp8 codes (compared as bytes)
                np.testing.assert_array_equal(got.view(np.uint8), want_codes.view(np.uint8))
    assert ks[4, 3, 1] == np.float32(1e-6)


@pytest.mark.parametrize("kv", TOKEN_HEAD_DTYPES)
def test_every_code_reads_as_the_reference_reads_it(kv):
    # All 256 byte values (int8's -128, which the quantizer never writes, and e4m3's NaN codes
    # aside) in every lane position, in the layer's own cache layout: cpu_flash's widening
    # (byte tables on AVX-512 VBMI) against the reference's scalar decode of the same bytes.
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=128, dtype="bfloat16", kv_cache_dtype=kv)
    flash, ref = attn.Attention(cfg, "cpu_flash"), attn.Attention(cfg, "reference")
    b = make_batch(np.random.default_rng(9), flash, [300, 70], [1, 20], poison=False)
    codes = b.cache.numpy().view(np.uint8)
    pattern = (np.arange(codes.size) * 7 % 256).astype(np.uint8)
    if kv == "fp8_per_token_head":
        pattern[(pattern & 0x7F) == 0x7F] = 0x3C  # no NaN codes: the outputs must stay comparable
    codes[...] = pattern.reshape(codes.shape)
    out = np.asarray(flash.forward(b.q, b.cache, b.md)).astype(np.float64)
    want = np.asarray(ref.forward(b.q, b.cache, b.md)).astype(np.float64)
    assert_close(out, want, "bfloat16", b.cache.dtype, "cpu_flash vs reference")


NONFINITE_WARNING = {
    "int8_per_token_head": r"1 NaN or infinite values .* int8_per_token_head",
    "int4_per_token_head": r"1 NaN or infinite values .* int4_per_token_head",
    "nvfp4": r"1 NaN / infinite values.* nvfp4 cache: a block of 16",
    "turboquant_4bit_nc": r"1 NaN or infinite values .* turboquant_4bit_nc",
}


@pytest.mark.parametrize("kv", list(NONFINITE_WARNING))
def test_nonfinite_values_warn_and_read_as_nan(kv):
    layer = attn.Attention(attn.LayerConfig(num_heads=2, num_kv_heads=1, head_size=32, dtype="float32", kv_cache_dtype=kv))
    cache = layer.make_cache(2)
    k = np.ones((1, 1, 32), np.float32)
    k[0, 0, 5] = np.inf
    md = attn.BatchMetadata(context_lens=[0], query_lens=[1], block_ids=[[0]], cache=cache)
    with pytest.warns(RuntimeWarning, match=NONFINITE_WARNING[kv]):
        layer.write_kv(k, np.ones((1, 1, 32), np.float32), cache, md)
    if cache.token_scales() is not None:
        assert np.isnan(cache.token_scales()[0][0, 0, 0])
    out = layer.forward(np.ones((1, 2, 32), np.float32), cache, md)
    assert np.isnan(np.asarray(out)).all()  # the key reads NaN, as an unquantized cache holding it would


torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup.sh installs it)")


@pytest.mark.parametrize("kv", TOKEN_HEAD_DTYPES)
def test_engine_owned_torch_codes_and_scales_are_used_in_place(kv):
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", kv_cache_dtype=kv)
    layer = attn.Attention(cfg)
    blocks, bs = 5, layer.block_size
    code_dtype = torch.int8 if kv == "int8_per_token_head" else torch.float8_e4m3fn
    layout = layer.kv_cache_layout
    codes = torch.zeros(layer.kv_cache_shape(blocks), dtype=code_dtype)
    ks = torch.zeros((blocks, bs, 2), dtype=torch.float32)
    vs = torch.zeros_like(ks)
    cache = attn.KVCache.from_dlpack(codes, layout=layout, k_scales=ks, v_scales=vs)
    assert cache.kv_cache_dtype == kv and not cache.owns_storage
    rng = np.random.default_rng(2)
    k = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    v = torch.from_numpy(rng.standard_normal((40, 2, 64)).astype(np.float32)).to(torch.bfloat16)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[40], block_ids=[[3, 0, 2][: -(-40 // bs)]], cache=cache)
    layer.write_kv(k, v, cache, md)
    assert ks.abs().sum() > 0 and vs.abs().sum() > 0 and codes.view(torch.uint8).abs().sum() > 0  # the engine's memory
    got_k = cache.token_scales()[0]
    assert got_k.ctypes.data == ks.data_ptr()
    want = token_head_quantized(k.float().numpy(), STORAGE[kv])[2][..., 0]
    blk = [3, 0, 2]
    for t in range(40):
        np.testing.assert_array_equal(ks.numpy()[blk[t // bs], t % bs], want[t])
    # Attention over the engine's cache matches the reference on the dequantized values.
    q = torch.from_numpy(rng.standard_normal((40, 8, 64)).astype(np.float32)).to(torch.bfloat16)
    out = layer.forward(q, cache, md)
    from helpers import reference_attention
    kd = token_head_quantized(k.float().numpy(), STORAGE[kv])[0]
    vd = token_head_quantized(v.float().numpy(), STORAGE[kv])[0]
    want_out = reference_attention(q.float().numpy().astype(np.float64), [kd], [vd], query_lens=[40], seq_lens=[40],
                                   scale=layer.scale)
    assert_close(out.float().numpy(), want_out, "bfloat16", cache.dtype)


def test_token_scale_tensors_are_validated():
    codes = torch.zeros((4, 2, 16, 2, 32), dtype=torch.int8)
    with pytest.raises(attn.Error, match=r"k_scales=None invalid: expected the engine's float32"):
        attn.KVCache.from_dlpack(codes)
    with pytest.raises(attn.Error, match=r"k_scales.shape=\(4, 16, 3\) invalid: expected \(4, 16, 2\)"):
        attn.KVCache.from_dlpack(codes, k_scales=torch.zeros((4, 16, 3)), v_scales=torch.zeros((4, 16, 2)))
    with pytest.raises(attn.Error, match=r"k_scales.dtype=float16 invalid: expected float32"):
        attn.KVCache.from_dlpack(codes, k_scales=torch.zeros((4, 16, 2), dtype=torch.float16), v_scales=torch.zeros((4, 16, 2)))
    with pytest.raises(attn.Error, match=r"tensor.dtype=bfloat16 invalid: expected int8 or float8_e4m3fn"):
        attn.KVCache.from_dlpack(torch.zeros((4, 2, 16, 2, 32), dtype=torch.bfloat16), k_scales=torch.zeros((4, 16, 2)),
                                 v_scales=torch.zeros((4, 16, 2)))
