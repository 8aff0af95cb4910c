"""Every backend that serves a config, run from Python, against the fp64 NumPy reference:
GQA, causal / non-causal, sliding window, sinks, soft-cap, ragged paged batches, fp8 caches."""
import zlib

import numpy as np
import pytest

import attn
from helpers import assert_close, make_batch, valid_cpu_backends

SEED = np.random.SeedSequence().entropy  # fresh each run; printed in every failure's parameters

# Mixed prefill, chunked prefill and decode sequences in one batch.
RAGGED = dict(context_lens=[0, 37, 5, 64], query_lens=[23, 9, 1, 1])


def config(**kw):
    base = dict(num_heads=8, num_kv_heads=2, head_size=64, dtype="bfloat16")
    base.update(kw)
    return attn.LayerConfig(**base)


# name → (LayerConfig keywords, make_batch keywords). Parameters stay plain data: pytest keeps
# them alive past the extension's teardown.
CASES = {
    "gqa_causal_bf16": ({}, {}),
    "mha_f32": (dict(num_kv_heads=8, dtype="float32"), {}),
    "mqa_f16": (dict(num_kv_heads=1, dtype="float16", head_size=128), {}),
    "non_causal": (dict(use_non_causal=True, dtype="float32"), {}),
    "sliding_window": (dict(sliding_window=16, dtype="float16"), {}),
    "soft_cap": (dict(logits_soft_cap=5.0, dtype="float32"), {}),
    "sinks": (dict(has_sink=True, dtype="float32"), {}),
    "fp8_e4m3": (dict(kv_cache_dtype="fp8_e4m3", dtype="float32"), {"kv_scale": 0.05}),
    "fp8_e5m2": (dict(kv_cache_dtype="fp8_e5m2", dtype="bfloat16"), {"kv_scale": 0.5}),
}


def cases():
    for name, (kw, _) in CASES.items():
        for backend in valid_cpu_backends(config(**kw)):
            yield pytest.param(name, backend, id=f"{name}-{backend}")


@pytest.mark.parametrize("name,backend", list(cases()))
def test_matches_fp64_reference(name, backend):
    kw, extra = CASES[name]
    cfg = config(**kw)
    rng = np.random.default_rng([SEED, zlib.crc32(f"{cfg!r}{backend}".encode())])
    sinks = rng.standard_normal(cfg.num_heads) if cfg.has_sink else None
    layer = attn.Attention(cfg, backend, sinks=sinks)
    assert layer.backend == backend
    b = make_batch(rng, layer, RAGGED["context_lens"], RAGGED["query_lens"], **extra)
    out = layer.forward(b.q, b.cache, b.md)
    want = b.reference(causal=cfg.causal, window=cfg.sliding_window, soft_cap=cfg.logits_soft_cap,
                       sinks=None if sinks is None else np.asarray(sinks, dtype=np.float32).astype(np.float64))
    assert_close(out, want, cfg.dtype, b.cache.dtype, f"{backend} seed={SEED}")


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_block_sizes_and_explicit_scale(block_size):
    cfg = config(block_size=block_size, dtype="float32")
    rng = np.random.default_rng(SEED)
    for backend in valid_cpu_backends(cfg):
        layer = attn.Attention(cfg, backend, scale=0.3)
        assert layer.scale == pytest.approx(0.3) and layer.block_size == block_size
        b = make_batch(rng, layer, [3, 70], [5, 1])
        assert b.cache.block_size == block_size
        assert_close(layer.forward(b.q, b.cache, b.md), b.reference(), "float32", b.cache.dtype, backend)


def test_aliased_blocks_share_a_prefix():
    # Two sequences whose tables share their first (full) block: both read the same cached prefix.
    cfg = config(dtype="float32")
    layer = attn.Attention(cfg, "reference")
    rng = np.random.default_rng(SEED)
    bs = 16
    cache = layer.make_cache(8, bs)
    prefix_k = rng.standard_normal((bs, 2, 64)).astype(np.float32)
    prefix_v = rng.standard_normal((bs, 2, 64)).astype(np.float32)
    md_prefix = attn.BatchMetadata(context_lens=[0], query_lens=[bs], block_ids=[[5]], cache=cache)
    layer.write_kv(prefix_k, prefix_v, cache, md_prefix)
    tails_k = rng.standard_normal((2, 2, 64)).astype(np.float32)
    tails_v = rng.standard_normal((2, 2, 64)).astype(np.float32)
    md = attn.BatchMetadata(context_lens=[bs, bs], query_lens=[1, 1], block_ids=[[5, 2], [5, 7]], cache=cache)
    layer.write_kv(tails_k, tails_v, cache, md)
    q = rng.standard_normal((2, 8, 64)).astype(np.float32)
    ks = [np.concatenate([prefix_k, tails_k[i:i + 1]]).astype(np.float64) for i in range(2)]
    vs = [np.concatenate([prefix_v, tails_v[i:i + 1]]).astype(np.float64) for i in range(2)]
    from helpers import reference_attention
    want = reference_attention(q.astype(np.float64), ks, vs, query_lens=[1, 1], seq_lens=[bs + 1] * 2,
                               scale=layer.scale)
    for backend in valid_cpu_backends(cfg):
        other = attn.Attention(cfg, backend)
        if other.make_cache(1, bs).layout != cache.layout:
            continue  # this cache was written in the reference's layout
        assert_close(other.forward(q, cache, md), want, "float32", "float32", backend)


def test_metadata_is_built_from_lengths_and_block_ids():
    md = attn.BatchMetadata(seq_lens=[5, 20], query_lens=[5, 1], block_ids=[[3], [0, 1]], block_size=16, num_blocks=4)
    assert (md.num_seqs, md.num_tokens, md.max_query_len, md.max_seq_len) == (2, 6, 5, 20)
    assert md.query_start_loc.tolist() == [0, 5, 6]
    assert md.seq_lens.tolist() == [5, 20]
    assert md.block_table.tolist() == [[3, -1], [0, 1]]
    assert md.slot_mapping.tolist() == [48, 49, 50, 51, 52, 16 + 3]
    with pytest.raises(ValueError):
        md.slot_mapping[0] = 1  # read-only copies: the metadata object is the truth
    with pytest.raises(ValueError, match="block"):
        attn.BatchMetadata(seq_lens=[40], query_lens=[1], block_ids=[[0]], block_size=16, num_blocks=4)
    with pytest.raises(ValueError, match="exactly one of context_lens"):
        attn.BatchMetadata(query_lens=[1], block_ids=[[0]], block_size=16, num_blocks=4)


def test_cache_views_and_scales():
    cfg = config(kv_cache_dtype="fp8", dtype="bfloat16")
    layer = attn.Attention(cfg, "reference")
    cache = layer.make_cache(4)
    assert cache.dtype == "fp8_e4m3" and cache.kv_cache_dtype == "fp8"
    view = cache.numpy()
    assert view.shape == cache.shape and view.dtype.name == "float8_e4m3fn" and view.nbytes == cache.nbytes
    cache.fill(0.0)
    assert not view.astype(np.float32).any()
    cache.set_scales(0.5, 0.25)  # per tensor: replicated over the KV heads
    assert cache.k_scales == [0.5, 0.5] and cache.v_scales == [0.25, 0.25]
    with pytest.raises(ValueError, match="per-head scales"):
        cache.set_scales(0.5, [0.25, 0.125])
    with pytest.raises(ValueError, match="scale"):
        cache.set_scales(-1.0, 1.0)
    per_head = attn.Attention(cfg.replace(use_per_head_quant_scales=True), "reference").make_cache(4)
    per_head.set_scales([0.5, 2.0], [0.25, 0.125])
    assert per_head.per_head_scales and per_head.v_scales == [0.25, 0.125]


def test_per_head_fp8_scales_match_reference():
    cfg = config(kv_cache_dtype="fp8_e4m3", dtype="float32", use_per_head_quant_scales=True)
    rng = np.random.default_rng(SEED)
    for backend in valid_cpu_backends(cfg):
        layer = attn.Attention(cfg, backend)
        b = make_batch(rng, layer, [20, 3], [4, 1], kv_scale=[0.02, 0.1])
        assert_close(layer.forward(b.q, b.cache, b.md), b.reference(), "float32", b.cache.dtype, backend)
