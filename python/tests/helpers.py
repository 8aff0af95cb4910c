"""Shared test machinery: the fp64 NumPy reference, the tolerance table and a builder that fills a
paged cache for a ragged batch through a layer's own write_kv (what the cache holds: kv_formats)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import ml_dtypes
import numpy as np

import attn
from kv_formats import (NUMPY_DTYPES, NVFP4_DTYPES, TOKEN_HEAD_DTYPES, TURBOQUANT_DTYPES, int4_query, int4_quantized,
                        nvfp4_quantized, rounded, stored, token_head_quantized, turboquant_slot)


def tolerance(io_dtype: str, kv_storage: str) -> tuple[float, float]:
    """(atol, rtol) against the fp64 reference: mirrors tests/support's central table. The
    reference sees exactly the values the cache holds, so this bounds only kernel error."""
    if io_dtype == "float32":
        return (2e-5, 2e-5) if kv_storage == "float32" else (5e-3, 5e-3)
    return {"float16": (2e-3, 2e-3), "bfloat16": (1.2e-2, 1.2e-2)}[io_dtype]


def reference_attention(q, k, v, *, query_lens, seq_lens, scale, causal=True, window=0, soft_cap=0.0,
                        sinks=None) -> np.ndarray:
    """fp64 attention over concatenated sequences (DESIGN.md §4). q: [T, H, D]; k, v: per-sequence
    lists of [seq_len, Hkv, D(v)]. Query i of a sequence sits at position seq_len - query_len + i."""
    num_heads, group = q.shape[1], q.shape[1] // k[0].shape[1]
    out = np.zeros((q.shape[0], num_heads, v[0].shape[2]))
    start = 0
    for s, (qlen, slen) in enumerate(zip(query_lens, seq_lens)):
        for h in range(num_heads):
            ks, vs = k[s][:, h // group, :], v[s][:, h // group, :]
            qs = q[start:start + qlen, h, :]
            logits = (qs @ ks.T) * scale
            if soft_cap:
                logits = soft_cap * np.tanh(logits / soft_cap)
            qpos = np.arange(slen - qlen, slen)[:, None]
            kpos = np.arange(slen)[None, :]
            visible = np.ones((qlen, slen), dtype=bool)
            if causal:
                visible &= kpos <= qpos
            if window:
                visible &= kpos > qpos - window
            logits = np.where(visible, logits, -np.inf)
            m = logits.max(axis=1, keepdims=True) if slen else np.full((qlen, 1), -np.inf)
            if sinks is not None:
                m = np.maximum(m, sinks[h])
            m = np.where(np.isfinite(m), m, 0.0)
            p = np.exp(logits - m)
            denom = p.sum(axis=1, keepdims=True)
            if sinks is not None:
                denom = denom + np.exp(sinks[h] - m)
            out[start:start + qlen, h, :] = np.divide(p @ vs, denom, out=np.zeros((qlen, vs.shape[1])), where=denom > 0)
        start += qlen
    return out


@dataclass
class Batch:
    """A ragged batch written into a paged cache: what forward() needs plus the reference inputs."""

    layer: attn.Attention
    cache: attn.KVCache
    md: attn.BatchMetadata
    q: np.ndarray  # in the layer dtype
    k_ref: list = field(default_factory=list)  # per sequence [seq_len, Hkv, D], as stored (fp64)
    v_ref: list = field(default_factory=list)
    q_ref: np.ndarray | None = None
    query_lens: list = field(default_factory=list)
    seq_lens: list = field(default_factory=list)

    def reference(self, **kw) -> np.ndarray:
        return reference_attention(self.q_ref, self.k_ref, self.v_ref, query_lens=self.query_lens,
                                   seq_lens=self.seq_lens, scale=self.layer.scale, **kw)


def make_batch(rng: np.random.Generator, layer: attn.Attention, context_lens, query_lens, *, block_size=None,
               kv_scale=None, spare_blocks=3, poison=True) -> Batch:
    """Random q/k/v for sequences with `context_lens` cached tokens and `query_lens` new ones.
    Blocks are drawn as a random permutation (so tables are scattered), unused slots hold NaN, and
    every token's K/V goes in through layer.write_kv: the context in one earlier step, then the new
    tokens in the step whose metadata forward() gets."""
    cfg = layer.config
    block_size = block_size or layer.block_size
    seq_lens = [c + q for c, q in zip(context_lens, query_lens)]
    need = [max(1, math.ceil(n / block_size)) for n in seq_lens]
    num_blocks = sum(need) + spare_blocks
    cache = layer.make_cache(num_blocks, block_size)
    if poison:
        cache.fill(float("nan"))
    if kv_scale is not None:
        cache.set_scales(kv_scale, kv_scale)
    scales = np.asarray(cache.k_scales)
    perm = rng.permutation(num_blocks)
    block_ids, at = [], 0
    for n in need:
        block_ids.append([int(b) for b in perm[at:at + n]])
        at += n

    dt = NUMPY_DTYPES[cfg.dtype]
    hv = cfg.effective_head_size_v
    k_all = [rng.standard_normal((n, cfg.num_kv_heads, cfg.head_size)) for n in seq_lens]
    v_all = [rng.standard_normal((n, cfg.num_kv_heads, hv)) for n in seq_lens]
    storage = cache.dtype

    def write(lo, hi, md):
        k = np.concatenate([k_all[s][lo[s]:hi[s]] for s in range(len(seq_lens))]).astype(dt)
        v = np.concatenate([v_all[s][lo[s]:hi[s]] for s in range(len(seq_lens))]).astype(dt)
        layer.write_kv(k, v, cache, md)

    zeros = [0] * len(seq_lens)
    if any(context_lens):
        md_ctx = attn.BatchMetadata(context_lens=zeros, query_lens=list(context_lens), block_ids=block_ids, cache=cache)
        write(zeros, list(context_lens), md_ctx)
    md = attn.BatchMetadata(context_lens=list(context_lens), query_lens=list(query_lens), block_ids=block_ids,
                            cache=cache, causal=cfg.causal)
    write(list(context_lens), seq_lens, md)

    num_tokens = sum(query_lens)
    q = rng.standard_normal((num_tokens, cfg.num_heads, cfg.head_size)).astype(dt)
    batch = Batch(layer, cache, md, q, query_lens=list(query_lens), seq_lens=seq_lens)
    batch.q_ref = q.astype(np.float64)
    # The cache converts from the I/O dtype, so the reference rounds twice like the data did.
    if cache.kv_cache_dtype == "int4_per_token_head":
        batch.q_ref = int4_query(q.astype(np.float32), cfg.dtype)
        batch.k_ref = [int4_quantized(rounded(k, cfg.dtype), cfg.dtype)[0] for k in k_all]
        batch.v_ref = [int4_quantized(rounded(v, cfg.dtype), cfg.dtype)[0] for v in v_all]
        return batch
    if cache.kv_cache_dtype in TURBOQUANT_DTYPES:
        batch.k_ref, batch.v_ref = [], []
        for k, v in zip(k_all, v_all):
            _, kr, vr = turboquant_slot(rounded(k, cfg.dtype), rounded(v, cfg.dtype), cache.kv_cache_dtype)
            batch.k_ref.append(kr)
            batch.v_ref.append(vr)
        return batch
    if cache.kv_cache_dtype in NVFP4_DTYPES:  # per KV head: its global scale
        four = cache.kv_cache_dtype == "nvfp4_4over6"
        def nv(x, g):
            return np.stack([nvfp4_quantized(rounded(x[:, h], cfg.dtype), g[h], four)[0] for h in range(x.shape[1])], axis=1)
        batch.k_ref = [nv(k, np.asarray(cache.k_scales)) for k in k_all]
        batch.v_ref = [nv(v, np.asarray(cache.v_scales)) for v in v_all]
        return batch
    if cache.kv_cache_dtype in TOKEN_HEAD_DTYPES:
        batch.k_ref = [token_head_quantized(rounded(k, cfg.dtype), storage)[0] for k in k_all]
        batch.v_ref = [token_head_quantized(rounded(v, cfg.dtype), storage)[0] for v in v_all]
        return batch
    batch.k_ref = [stored(rounded(k, cfg.dtype), storage, scales) for k in k_all]
    batch.v_ref = [stored(rounded(v, cfg.dtype), storage, scales) for v in v_all]
    return batch


def filled_step(layer, rng, context, query):
    """A cache of the layer holding context + query tokens per sequence (random K/V written through
    write_kv), and the step's metadata. The block ids depend only on the lengths and block size, so
    layers of one config get equal block tables: one plan fits them all."""
    cfg = layer.config
    seq = [c + q for c, q in zip(context, query)]
    per = [-(-s // layer.block_size) for s in seq]
    order = np.random.default_rng(0).permutation(sum(per) + 2)  # scattered, the same for every layer
    cache = layer.make_cache(len(order))
    at = np.cumsum([0] + per)
    block_ids = [[int(x) for x in order[at[i]:at[i + 1]]] for i in range(len(seq))]
    fill = attn.BatchMetadata(context_lens=[0] * len(seq), query_lens=seq, block_ids=block_ids, cache=cache)
    dt = np.float32 if cfg.dtype == "float32" else ml_dtypes.bfloat16
    k = rng.standard_normal((sum(seq), cfg.num_kv_heads, cfg.head_size)).astype(dt)
    v = None if cfg.use_mla else rng.standard_normal((sum(seq), cfg.num_kv_heads, cfg.effective_head_size_v)).astype(dt)
    layer.write_kv(k, v, cache, fill)
    md = attn.BatchMetadata(context_lens=context, query_lens=query, block_ids=block_ids, cache=cache)
    return SimpleNamespace(layer=layer, cache=cache, md=md)


def assert_close(got: np.ndarray, want: np.ndarray, io_dtype: str, kv_storage: str, what: str = "out"):
    got = np.asarray(got).astype(np.float64)
    assert not np.isnan(got).any(), f"{what}: NaN in the output (unwritten rows or poison read)"
    atol, rtol = tolerance(io_dtype, kv_storage)
    err = np.abs(got - want)
    bad = err > atol + rtol * np.abs(want)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} elements off; max error {err.max():.3g} "
                           f"(atol {atol}, rtol {rtol}) at {np.unravel_index(err.argmax(), err.shape)}")


def valid_cpu_backends(cfg: attn.LayerConfig) -> list[str]:
    """Every registered backend that can serve cfg on this machine (whatever backends exist)."""
    return [c.backend for c in attn.explain(cfg).candidates if c.valid]


def cosine_to_unquantized(kv_cache_dtype: str, outlier_channel: bool, n: int = 600) -> np.ndarray:
    """Cosine similarity of each output row of a Llama-shaped fp32 layer (8 / 2 heads x 128) over a
    `kv_cache_dtype` cache of n random keys with the fp64 attention over the unquantized K / V (one
    K channel x20 when `outlier_channel`): the quality of a 4-bit format, 4 query rows x 8 heads."""
    cfg = attn.LayerConfig(num_heads=8, num_kv_heads=2, head_size=128, dtype="float32", kv_cache_dtype=kv_cache_dtype)
    layer = attn.Attention(cfg)
    rng = np.random.default_rng(3)
    k = rng.standard_normal((n, 2, 128)).astype(np.float32)
    if outlier_channel:
        k[:, :, 7] *= 20.0
    v = rng.standard_normal((n, 2, 128)).astype(np.float32)
    q = rng.standard_normal((4, 8, 128)).astype(np.float32)
    cache = layer.make_cache(-(-n // layer.block_size))
    blocks = list(range(cache.num_blocks))
    layer.write_kv(k, v, cache, attn.BatchMetadata(context_lens=[0], query_lens=[n], block_ids=[blocks], cache=cache))
    md = attn.BatchMetadata(context_lens=[n - 4], query_lens=[4], block_ids=[blocks], cache=cache)
    out = np.asarray(layer.forward(q, cache, md)).astype(np.float64)
    exact = reference_attention(q.astype(np.float64), [k.astype(np.float64)], [v.astype(np.float64)], query_lens=[4],
                                seq_lens=[n], scale=layer.scale)
    return (out * exact).sum(-1) / np.linalg.norm(out, axis=-1) / np.linalg.norm(exact, axis=-1)


def written_cache(kv_cache_dtype: str, dtype: str, layout: str, seed: int, edit=None, scales=None, d: int = 64):
    """A 6-block cache (block size 16, 2 KV heads, head size d, `layout`) holding 20 tokens of random
    K (each vector scaled by 0.01 .. 30) and V written by write_kv into blocks 4 then 1, cast to
    `dtype`; `edit(k, v)` changes them first (outliers, constant vectors), `scales`: (k_scale,
    v_scale) set before the write. Returns (cache, k, v) with k, v as written."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((20, 2, d)) * rng.uniform(0.01, 30, (20, 2, 1))
    v = rng.standard_normal((20, 2, d))
    if edit is not None:
        edit(k, v)
    layer = attn.Attention(attn.LayerConfig(num_heads=4, num_kv_heads=2, head_size=d, dtype=dtype, kv_cache_dtype=kv_cache_dtype))
    cache = attn.KVCache(6, block_size=16, num_kv_heads=2, head_size=d, kv_cache_dtype=kv_cache_dtype, layout=layout)
    assert cache.dtype == "int8" and cache.kv_cache_dtype == kv_cache_dtype
    if scales is not None:
        cache.set_scales([scales[0]], [scales[1]])
    k, v = k.astype(NUMPY_DTYPES[dtype]), v.astype(NUMPY_DTYPES[dtype])
    md = attn.BatchMetadata(context_lens=[0], query_lens=[20], block_ids=[[4, 1]], cache=cache)
    layer.write_kv(k, v, cache, md)
    return cache, k, v


def torch_step(layer: attn.Attention, cache, seed: int = 2):
    """40 tokens of random bf16 torch K / V written into `cache` (blocks 3, 0, 2 in order) and
    attended by as many random queries, the way an engine calls attn on its own tensors: returns
    (k, v, q, out) as torch tensors and the block ids."""
    import torch
    rng = np.random.default_rng(seed)
    hkv, d, h = layer.config.num_kv_heads, layer.config.head_size, layer.config.num_heads

    def rand(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)

    k, v = rand(40, hkv, d), rand(40, hkv, d)
    blocks = [3, 0, 2][: -(-40 // layer.block_size)]
    md = attn.BatchMetadata(context_lens=[0], query_lens=[40], block_ids=[blocks], cache=cache)
    layer.write_kv(k, v, cache, md)
    q = rand(40, h, d)
    return k, v, q, layer.forward(q, cache, md), blocks
