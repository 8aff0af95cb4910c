"""What an inference engine needs beyond the README example: caches it owns (kv_cache_shape,
KVCache.from_dlpack), q as [tokens, heads * head_size], metadata as integer arrays, and the
mistakes that used to pass silently (causal mismatch, duplicate blocks, scale=0.0, fp8
saturation, the oracle serving a layer)."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import attn
from helpers import assert_close, make_batch


def aligned_zeros(shape, dtype):
    """Zeros at a 64-byte aligned address, as torch allocates (NumPy guarantees only 16)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + n].view(dtype).reshape(shape)


def bf16_layer(**kw):
    return attn.Attention(attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16", **kw))


def test_flat_q_gives_flat_out_with_the_same_values():
    layer = bf16_layer()
    b = make_batch(np.random.default_rng(1), layer, [37, 5], [1, 9])
    out3 = layer.forward(b.q, b.cache, b.md)
    flat = b.q.reshape(b.q.shape[0], -1)
    out2 = layer.forward(flat, b.cache, b.md)
    assert out2.shape == (10, 8 * 64)
    np.testing.assert_array_equal(out2.reshape(out3.shape).view(np.uint16), out3.view(np.uint16))
    assert_close(out2.reshape(out3.shape), b.reference(), "bfloat16", b.cache.dtype)
    with pytest.raises(attn.Error, match=r"q.shape\[1\]=100 invalid: expected a multiple of 8 heads"):
        layer.forward(np.zeros((10, 100), ml_dtypes.bfloat16), b.cache, b.md)


def test_metadata_takes_integer_arrays_and_padded_block_tables():
    layer = bf16_layer()
    b = make_batch(np.random.default_rng(2), layer, [20, 3], [2, 1])
    table = np.zeros((2, 8), dtype=np.int32)  # an engine's padded block table
    for s, row in enumerate(b.md.block_table):
        n = int((row >= 0).sum())
        table[s, :n] = row[:n]
    md = attn.BatchMetadata(context_lens=np.array([20, 3]), query_lens=np.array([2, 1], dtype=np.int64),
                            block_ids=table, cache=b.cache)
    np.testing.assert_array_equal(md.slot_mapping, b.md.slot_mapping)
    assert_close(layer.forward(b.q, b.cache, md), b.reference(), "bfloat16", b.cache.dtype)
    with pytest.raises(TypeError, match="query_lens=.* invalid: expected a sequence of ints"):
        attn.BatchMetadata(context_lens=[0], query_lens=["x"], block_ids=[[0]], cache=b.cache)


def test_engine_owned_cache_is_wrapped_without_copying():
    layer = bf16_layer()
    shape = layer.kv_cache_shape(num_blocks=6)
    bs = layer.block_size
    assert shape == {"NHD": (6, 2, bs, 2, 64), "HND": (6, 2, 2, bs, 64), "HND_PAIRS": (6, 2, 2, bs, 64)}[layer.kv_cache_layout]
    assert layer.kv_cache_dtype == "bfloat16"
    engine = aligned_zeros(shape, ml_dtypes.bfloat16)
    cache = attn.KVCache.from_dlpack(engine, layout=layer.kv_cache_layout)
    assert not cache.owns_storage and cache.shape == shape and cache.dtype == "bfloat16"
    assert cache.numpy().ctypes.data == engine.ctypes.data
    md = attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[4]], cache=cache)
    k = np.ones((3, 2, 64), ml_dtypes.bfloat16)
    layer.write_kv(k, k, cache, md)
    written = engine.astype(np.float32)
    assert written[4].sum() == 2 * 3 * 2 * 64 and written[:4].sum() == 0 and written[5].sum() == 0
    out = layer.forward(np.ones((3, 8, 64), ml_dtypes.bfloat16), cache, md)
    np.testing.assert_array_equal(out.astype(np.float32), 1.0)  # every visible value is 1


def test_engine_owned_cache_is_validated():
    with pytest.raises(attn.Error, match=r"tensor.shape=\(6, 3, 16, 2, 64\) invalid: expected \[num_blocks, 2, block_size"):
        attn.KVCache.from_dlpack(np.zeros((6, 3, 16, 2, 64), np.float32))
    with pytest.raises(attn.Error, match=r"tensor.strides=dimension 4 stride 2 invalid: expected 1"):
        attn.KVCache.from_dlpack(np.zeros((6, 2, 16, 64, 2), np.float32).swapaxes(3, 4))
    with pytest.raises(TypeError, match=r"tensor.dtype=int32 invalid: expected a cache dtype"):
        attn.KVCache.from_dlpack(np.zeros((6, 2, 16, 2, 64), np.int32))
    with pytest.raises(attn.Error, match="Invalid layout: 'XYZ'. Valid values are: NHD, HND, MLA, HND_PAIRS"):
        attn.KVCache.from_dlpack(np.zeros((6, 2, 16, 2, 64), np.float32), layout="XYZ")
    with pytest.raises(attn.Error, match="external storage address=.* invalid: expected a multiple of 64 bytes"):
        attn.KVCache.from_dlpack(aligned_zeros((2 * 2 * 16 * 2 * 64 + 8,), np.float32)[8:].reshape(2, 2, 16, 2, 64))
    fp8 = attn.KVCache.from_dlpack(aligned_zeros((2, 2, 16, 2, 64), ml_dtypes.float8_e4m3fn))
    assert fp8.dtype == "fp8_e4m3" and fp8.kv_cache_dtype == "fp8_e4m3"


def test_encoder_only_layer_refuses_causal_metadata():
    layer = bf16_layer(attn_type="encoder_only")
    cache = layer.make_cache(num_blocks=2)
    q = np.zeros((3, 8, 64), ml_dtypes.bfloat16)
    causal = attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[0]], cache=cache)
    with pytest.raises(attn.Error, match="metadata.causal=true invalid: expected false for this encoder_only layer"):
        layer.forward(q, cache, causal)
    layer.forward(q, cache, attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[0]], cache=cache, causal=False))
    with pytest.raises(attn.Error, match="metadata.causal=false invalid: expected true for this decoder layer"):
        bf16_layer().forward(q, cache, attn.BatchMetadata(context_lens=[0], query_lens=[3], block_ids=[[0]], cache=cache,
                                                          causal=False))


def test_same_block_twice_in_one_sequence_is_refused_where_this_step_writes():
    with pytest.raises(attn.Error, match=r"seqs\[0\].block_ids\[1\]=3 invalid: expected distinct blocks within one sequence"):
        attn.BatchMetadata(context_lens=[20], query_lens=[1], block_ids=[[3, 3]], block_size=16, num_blocks=8)
    attn.BatchMetadata(context_lens=[20, 20], query_lens=[1, 1], block_ids=[[3, 4], [3, 5]], block_size=16, num_blocks=8)
    # A null block standing in for context a sliding window dropped may repeat: nothing writes it.
    attn.BatchMetadata(context_lens=[40], query_lens=[1], block_ids=[[0, 0, 5]], block_size=16, num_blocks=8)


def test_scale_none_is_the_default_and_zero_is_an_error():
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
    assert attn.Attention(cfg).scale == pytest.approx(64 ** -0.5)
    assert attn.Attention(cfg, scale=0.5).scale == 0.5
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(attn.Error, match=r"scale=.* invalid: expected a finite value > 0, or None for 1/sqrt"):
            attn.Attention(cfg, scale=bad)


def test_fp8_saturation_warns_and_can_be_an_error():
    layer = attn.Attention(attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16",
                                            kv_cache_dtype="fp8"), "reference")
    cache = layer.make_cache(num_blocks=2)
    md = attn.BatchMetadata(context_lens=[0], query_lens=[2], block_ids=[[0]], cache=cache)
    k = np.full((2, 2, 64), 1000.0, ml_dtypes.bfloat16)
    with pytest.warns(RuntimeWarning, match=r"256 values written to this fp8_e4m3 cache lay beyond its range .*448"):
        layer.write_kv(k, k * 0, cache, md)
    cache.set_scales(4.0, 4.0)  # 1000 / 4 fits: silent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer.write_kv(k, k, cache, md)
        cache.set_scales(1.0, 1.0)
        with pytest.raises(RuntimeWarning, match="set larger scales"):
            layer.write_kv(k, k, cache, md)


def test_decision_says_when_the_slow_oracle_serves_a_layer():
    d = attn.select(attn.LayerConfig(num_heads=8, num_kv_heads=8, head_size=300, dtype="bfloat16"))
    assert d.backend == "reference"
    assert "no production backend serves this layer" in d.slow_path and "head_size=300" in d.slow_path, d.slow_path
    assert "slow reference path: reference" in str(d)
    assert not attn.select(attn.LayerConfig(num_heads=8, num_kv_heads=8, head_size=128, dtype="bfloat16")).slow_path


def test_layer_config_help_lists_every_keyword():
    doc = attn.LayerConfig.__init__.__doc__
    for field in ("num_heads: int = 32", "head_size: int = 128", "sliding_window: int = 0", "has_sink: bool = False",
                  "dtype", "kv_cache_dtype", "logits_soft_cap", "attn_type"):
        assert field in doc, (field, doc)


def test_package_docstring_example_runs():
    lines = [line[4:] for line in attn.__doc__.splitlines() if line.startswith("    ")]
    exec("\n".join(lines), {})
